"""SIGKILL at the compute point of step 20 (RINGMASTER_TEST_CRASH_AT) under
shrink, replace and fail; see crash.py."""
import crash

crash.main("compute")

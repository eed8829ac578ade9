"""SIGKILL in the step gate of step 20 (the coordinator-held per-step
barrier of the gated straggler policies; here `deadline`) while the peers
wait there, under shrink, replace and fail; see crash.py."""
import crash

crash.main("barrier", {"straggler_policy": "deadline"})

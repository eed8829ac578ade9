"""SIGKILL at the allreduce point of step 20 on the plain training step (no
straggler policy, no simulated compute: the path a default job runs), under
shrink, replace and fail; see crash.py."""
import crash

crash.main("allreduce", plain=True)

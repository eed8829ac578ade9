"""The coordinator is SIGKILLed mid-job and restarted on the same db file and
address while the workers talk to it through `ringmaster relay`
(test_restart_coordinator.run with the workers behind the relay): the
relay's stream ends, the workers re-join and re-open their Sessions through
the relay on a new stream (or at the coordinator, whichever answers first),
no acknowledged event is lost, the job finishes at the next generation,
nobody is declared lost by the relay, and the relay lives on."""
import os

import rmtest
import test_restart_coordinator


def test(env):
    env.start_coordinator()
    relay, via = env.start_relay(os.path.join(env.dir, "relay.sock"))
    after = test_restart_coordinator.run(env, via)
    assert not [e.message for e in after if "its relay saw" in e.message]
    assert relay.poll() is None, "the relay exited"


if __name__ == "__main__":
    rmtest.main(test)

#!/usr/bin/python3
"""test_sse_resume.py - Last-Event-ID resume across a coordinator restart
("Hardening"), against a real `ringmaster serve`.

A stream sees events with ids (event id = seq * 10^6, api/sse.h); the server
is SIGKILLed and restarted on the same db file and ports; more events are
made over REST; a stream resumed with the last id seen gets exactly the
events it missed, from SQLite, in order, without duplicates and without
`reset`, then continues live. A ?job= resume gets that job's events only.
Ids this server never issued (a seq from the future, the pre-issue-11
wall-clock ids, a progress id older than the ring) get `reset` first; a
malformed id gets 400. Every wait has a deadline.

usage: test_sse_resume.py --ringmaster PATH
"""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from rmserver import args as rmserver_args  # noqa: E402
from rmserver import Server, FAILS, check, read_addresses, stop_serve, verdict  # noqa: E402
from test_http import Sse  # noqa: E402

SCALE = 1000000


class Serve:
    """`ringmaster serve` on a given db file and addresses (port 0 = any)."""

    def __init__(self, binary, db, grpc="127.0.0.1:0", http="127.0.0.1:0", log=None):
        self.token = "test-token"
        env = dict(os.environ, RINGMASTER_API_TOKEN=self.token, RINGMASTER_LOG_LEVEL="warn",
                   RINGMASTER_SSE_KEEPALIVE_MS="300")
        self.proc = subprocess.Popen([binary, "serve", "--db", db, "--grpc", grpc, "--http", http],
                                     stdout=subprocess.PIPE, stderr=log, env=env)
        self.http, self.grpc = read_addresses(self.proc)
        if self.http is None or self.grpc is None:
            self.kill()
            raise RuntimeError("ringmaster serve did not print its addresses")
        self.host, port = self.http.rsplit(":", 1)
        self.port = int(port)

    def request(self, *a, **kw):
        return Server.request(self, *a, **kw)

    def submit(self, name):
        st, _, j = self.request("POST", "/api/v1/jobs", {"name": name, "launcher": "none",
                                                         "world_size": 1}, token=self.token)
        assert st == 201, (st, j)
        return j

    def cancel(self, job):
        st, _, j = self.request("POST", f"/api/v1/jobs/{job['id']}/cancel", {}, token=self.token)
        assert st == 200, (st, j)

    def stored(self, job, after=0):
        st, _, ev = self.request("GET", f"/api/v1/jobs/{job['id']}/events?after={after}")
        assert st == 200, (st, ev)
        return ev["events"]

    def kill(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGKILL)
        self.proc.wait(timeout=10)
        self.proc.stdout.close()

    def stop(self):
        return stop_serve(self.proc)


def collect(stream, until, timeout=10):
    """Events (dicts) until until(list) is true or the deadline."""
    got = []
    for ev in stream.events(timeout):
        got.append(ev)
        if until(got):
            break
    return got


def events_only(got):
    return [e for e in got if e["event"] == "event"]


def first_event(srv, last_id, query=""):
    s = Sse(srv, query, last_id=last_id)
    ev = next(s.events(5), None)
    s.close()
    return ev


def check_ids(got, what):
    for e in events_only(got):
        d = json.loads(e["data"])
        check(int(e["id"]) == d["seq"] * SCALE, f"{what}: event id {e['id']} = seq {d['seq']} * 10^6")


def main():
    a = rmserver_args()
    tmp = tempfile.TemporaryDirectory(prefix="rm-sse-resume-")
    db = os.path.join(tmp.name, "rm.db")
    log = open(os.path.join(tmp.name, "server.log"), "w")
    srv = Serve(a.ringmaster, db, log=log)
    try:
        # 1. A stream sees events with ids.
        ja = srv.submit("resume-a")
        s = Sse(srv)
        check(s.status == 200, "stream opened")
        srv.cancel(ja)
        got = collect(s, lambda g: any(json.loads(e["data"]).get("kind") == "job_state"
                                       for e in events_only(g)))
        s.close()
        evs = events_only(got)
        check(evs, f"events seen before the restart: {got}")
        check_ids(got, "before restart")
        last_id = int(evs[-1]["id"])
        last_seq = last_id // SCALE
        # 2. SIGKILL, restart on the same db and ports, make more events.
        grpc, http = srv.grpc, srv.http
        srv.kill()
        srv = Serve(a.ringmaster, db, grpc=grpc, http=http, log=log)
        check(srv.http == http, f"restarted on the same http address {http}: {srv.http}")
        jb = srv.submit("resume-b")
        srv.cancel(jb)
        jc = srv.submit("resume-c")
        missed = sorted(srv.stored(ja, last_seq) + srv.stored(jb, last_seq) +
                        srv.stored(jc, last_seq), key=lambda e: e["seq"])
        check(len(missed) >= 3, f"events made after the restart: {missed}")
        # 3. Resume: exactly the missed events, in order, no reset, then live.
        r = Sse(srv, last_id=last_id)
        want = [e["seq"] for e in missed]
        got = collect(r, lambda g: len(events_only(g)) >= len(want) or
                      any(e["event"] == "reset" for e in g))
        check(not [e for e in got if e["event"] == "reset"], f"resume after restart: no reset: {got}")
        seqs = [json.loads(e["data"])["seq"] for e in events_only(got)]
        check(seqs == want, f"resume after restart replays the missed events in order: {seqs} "
                            f"want {want}")
        check_ids(got, "replayed")
        by_seq = {e["seq"]: e for e in missed}
        check(all(json.loads(e["data"]) == by_seq.get(json.loads(e["data"])["seq"])
                  for e in events_only(got)), "replayed data = the stored event (REST)")
        srv.cancel(jc)
        live = collect(r, lambda g: len(events_only(g)) >= 1)
        lseqs = [json.loads(e["data"])["seq"] for e in events_only(live)]
        check(len(lseqs) == 1 and lseqs[0] > want[-1],
              f"then live, no duplicate: {lseqs} after {want[-1]}")
        last_live = int(events_only(live)[-1]["id"]) if lseqs else None
        r.close()
        # 4. A filtered resume gets its job's events only.
        f = Sse(srv, f"?job={jb['id']}", last_id=last_id)
        wb = [e["seq"] for e in srv.stored(jb, last_seq)]
        got = collect(f, lambda g: len(events_only(g)) >= len(wb), timeout=5)
        f.close()
        fseqs = [json.loads(e["data"])["seq"] for e in events_only(got)]
        check(fseqs == wb and all(json.loads(e["data"])["job_id"] == jb["id"]
                                  for e in events_only(got)), f"?job resume: {fseqs} want {wb}")
        # 5. A resume from an id of this process, still in the ring.
        if last_live:
            jd = srv.submit("resume-d")
            ev = first_event(srv, last_live)
            check(ev is not None and ev["event"] == "event" and
                  json.loads(ev["data"])["job_id"] == jd["id"],
                  f"in-ring resume continues after {last_live}: {ev}")
        # 6. Ids this server never issued -> reset, then live; garbage -> 400.
        st, _, newest = srv.request("GET", f"/api/v1/jobs/{jc['id']}/events")
        top = max(e["seq"] for e in newest["events"])
        for bad, why in (((top + 1000) * SCALE, "a seq from the future"),
                         (int(time.time() * 1000) * 1000, "an id of the old wall-clock scheme"),
                         (last_seq * SCALE + 7, "a progress id from before the restart"),
                         (1, "a progress id older than the ring")):
            ev = first_event(srv, bad)
            check(ev is not None and ev["event"] == "reset", f"{why} ({bad}) -> reset: {ev}")
            if ev is not None and ev["event"] == "reset":
                check(int(ev["id"]) // SCALE >= top, f"reset carries a current id: {ev['id']}")
        st, _, body = srv.request("GET", "/api/v1/events", headers={"Last-Event-ID": "x1"})
        check(st == 400, f"malformed Last-Event-ID -> 400: {st} {body}")
    finally:
        rc = srv.stop()
        log.close()
        if FAILS:
            with open(os.path.join(tmp.name, "server.log")) as lf:
                sys.stderr.write(lf.read()[-3000:])
        tmp.cleanup()
    check(rc == 0, f"server exit status {rc} after SIGTERM")
    return verdict("api sse_resume: all checks passed")


if __name__ == "__main__":
    sys.exit(main())

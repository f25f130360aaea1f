"""A collectives plugin's failure story under mpirun: never a hang.

stuck-peer: rank 1 lives but never joins; rank 0's all_reduce (timeout 1 s) must fail with a
communication error naming the operation and the timeout, later calls must fail at once naming the
first failure, and destroying the broken communicator must end the job (MPI_Abort) — non-zero exit,
well before rank 1's 60 s sleep would end it.
dead-peer: rank 1 exits with status 3 while rank 0 waits in an all_reduce (timeout 60 s); mpirun must
end the job with rank 1's status, naming it, long before the timeout.

usage: collectives_failure_test.py --check BIN --plugin NAME -- MPIEXEC ARGS...
"""

import argparse
import subprocess
import sys
import time


def run(command, limit_s):
    start = time.monotonic()
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=limit_s)
    except subprocess.TimeoutExpired:
        sys.exit(f"FAILED: {' '.join(command)} still ran after {limit_s} s: a failure hangs")
    return done.returncode, done.stdout + done.stderr, time.monotonic() - start


def expect(ok, what, output):
    if not ok:
        sys.exit(f"FAILED: {what}\n--- output ---\n{output}")


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--check", required=True)
    parser.add_argument("--plugin", required=True)
    parser.add_argument("mpiexec", nargs="+")
    args = parser.parse_args()

    rc, out, seconds = run(args.mpiexec + [args.check, args.plugin, "stuck-peer"], 30)
    expect(rc != 0, "stuck-peer: the job exited 0 although a rank never joined", out)
    expect("all_reduce #1 (1 f32) timed out after 1 s" in out, "stuck-peer: no timeout error naming the call", out)
    expect("waiting for rank 1 (no call yet), which did not join it" in out,
           "stuck-peer: rank 0's timeout does not name rank 1 as the rank it waits for", out)
    expect("barrier #2: the communicator is broken since all_reduce #1" in out,
           "stuck-peer: a call after the failure did not fail naming the first failure", out)
    expect("still running" not in out, "stuck-peer: destroying the broken communicator did not end the job", out)
    print(f"stuck-peer: ended with exit {rc} after {seconds:.1f} s, the timeout named")

    rc, out, seconds = run(args.mpiexec + [args.check, args.plugin, "dead-peer"], 30)
    expect(rc == 3, f"dead-peer: exit {rc}, expected the dead rank's 3", out)
    expect("Exit code:    3" in out and "[[" in out, "dead-peer: mpirun did not name the dead process", out)
    print(f"dead-peer: ended with exit {rc} after {seconds:.1f} s, mpirun named the dead rank")


if __name__ == "__main__":
    main()

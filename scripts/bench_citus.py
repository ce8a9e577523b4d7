"""W13 on a throwaway Citus cluster beside the local PostgreSQL, in one run.

Starts a Citus coordinator and ``--workers`` workers on this machine (initdb + pg_ctl as the
``postgres`` user on free ports, as the Citus tests do: ``tests/citus/cluster.py``, but with
``fsync`` on, as on the plain server), runs
``session-sql bench --only W13`` with ``--citus-url`` set to the coordinator and ``--url`` to
the plain PostgreSQL, then stops the cluster and deletes its directory. The bench creates a
throwaway schema on each side and drops it. Extra arguments go to ``session-sql bench``.

    python scripts/bench_citus.py --url postgresql://postgres@127.0.0.1:5432/test -- --json
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.citus.cluster import citus_missing, start_cluster  # noqa: E402


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--url", default="postgresql://postgres@127.0.0.1:5432/test")
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("bench_args", nargs="*", help="passed to session-sql bench")
    args = parser.parse_args(argv)
    missing = citus_missing()
    if missing is not None:
        sys.stderr.write(f"bench_citus: {missing}\n")
        return 1
    # fsync on, as on the plain server (the test clusters run with it off).
    cluster = start_cluster(workers=args.workers, durable=True)
    try:
        command = [sys.executable, "-m", "session_sql.cli", "bench", "--url", args.url]
        command += ["--citus-url", cluster.url, "--only", "W13", *args.bench_args]
        # This checkout's session_sql, whatever the interpreter has installed.
        path = os.pathsep.join(p for p in (str(ROOT), os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path}
        return subprocess.run(command, check=False, env=env).returncode
    finally:
        cluster.close()


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

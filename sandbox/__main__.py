"""``python -m sandbox [--host H] [--port P] [--workspace DIR]``: serve the fake downstreams."""

from __future__ import annotations

import argparse
from pathlib import Path

from sandbox.server import serve


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve the Agent Ledger sandbox downstreams.")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8025)
    parser.add_argument("--workspace", type=Path, default=Path("var/workspaces/sandbox"))
    args = parser.parse_args()
    server = serve(args.host, args.port, args.workspace)
    print(f"sandbox serving on {server.url} (workspace {server.workspace})", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()


if __name__ == "__main__":
    main()

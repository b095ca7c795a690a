"""``python -m tests.support.local_hub [--root DIR] [--port N] [--token T]``: serve until Ctrl-C or SIGTERM."""

import argparse

from tests.support.local_hub import serve

parser = argparse.ArgumentParser(
    prog="python -m tests.support.local_hub",
    description="A local Hub-protocol server for tests and the demo (not huggingface.co).",
)
parser.add_argument("--root", default=None, help="directory for its repos (default: a temporary one)")
parser.add_argument("--port", type=int, default=0, help="API port on 127.0.0.1 (default: any free port)")
parser.add_argument("--token", default=None, help="require this token (HF_TOKEN) for writes and private repos")
args = parser.parse_args()
serve(args.root, port=args.port, token=args.token)

"""``python -m grpo_seq.serve [--host 127.0.0.1] [--port 8000] [--store DIR] [--max_jobs N]``."""

import sys

from .server import main

if __name__ == "__main__":  # the jobs' fork server imports this module too, as __mp_main__
    main(prog=sys.argv[0] if sys.argv[0].startswith("grpo-seq") else "python -m grpo_seq.serve")

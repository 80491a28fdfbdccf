"""The agent tests' own agent programs (agent_programs.py) import by name, as a user's module would."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

"""The command-line door: ``grpo-seq`` and the recipes. Options become job specs
(:mod:`.parse`), the programs run them (:mod:`.programs`), and misuse ends as one
``error: ...`` line (:mod:`.errors`). Nothing else in the package parses arguments."""

from .errors import NoteRunDir, cli_errors, exit_with, note_run_dir
from .parse import PATH_OPTIONS, defaults_yaml, options_table, parse_config, spec_file_values

__all__ = ["parse_config", "spec_file_values", "defaults_yaml", "options_table", "PATH_OPTIONS", "cli_errors",
           "note_run_dir", "NoteRunDir", "exit_with"]

"""MkDocs hook: the command-line reference, generated from shardvol's argument parser.

A page line ``<!-- cli-help: COMMAND -->`` becomes that subcommand's ``--help`` text
(``<!-- cli-help -->`` alone: the top-level command's), so the reference cannot drift
from :func:`shardvol.cli.build_parser`.
"""

from __future__ import annotations

import argparse
import os
import re
from typing import Any

MARKER = re.compile(r"^<!-- cli-help(?:: (?P<command>[a-z]+))? -->$", re.MULTILINE)
WIDTH = "96"  # argparse wraps help text to $COLUMNS


def _subparsers(parser: argparse.ArgumentParser) -> dict[str, argparse.ArgumentParser]:
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            return dict(action.choices)
    return {}


def _help(parser: argparse.ArgumentParser, command: str | None, page: str) -> str:
    if command is not None:
        commands = _subparsers(parser)
        if command not in commands:
            raise ValueError(f"{page}: no shardvol subcommand {command!r} "
                             f"(there are {sorted(commands)})")
        parser = commands[command]
    return f"```text\n{parser.format_help().rstrip()}\n```"


def on_page_markdown(markdown: str, page: Any, **kwargs: Any) -> str:
    if not MARKER.search(markdown):
        return markdown
    os.environ["COLUMNS"] = WIDTH
    from shardvol.cli import build_parser

    parser = build_parser()
    where = page.file.src_path
    return MARKER.sub(lambda m: _help(parser, m.group("command"), where), markdown)

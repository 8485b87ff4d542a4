"""mkdocs hook: the command-line reference (docs/cli.md) generated from the ``fhc-jax``
argparse parser (:func:`fhc_jax.cli.build_parser`) at build time.

docs/cli.md holds the prose and the marker ``<!-- cli-reference -->``; this hook replaces the
marker with one section per subcommand (its help, description, usage and a table of its
arguments), so a new subcommand or a renamed flag changes the page without anyone editing it.
A missing marker or a parser that cannot be built fails the build.

``render(parser)`` is importable on its own (tests/test_docs.py checks that every subcommand
of the parser appears in the page without building the site).
"""

from __future__ import annotations

import argparse
import html
import re
import textwrap

MARKER = "<!-- cli-reference -->"
PAGE = "cli.md"

_MD_SPECIAL = re.compile(r"([\\`*_\[\]|#])")


def _text(value: str) -> str:
    """Plain text for a Markdown table cell: HTML-escaped, Markdown specials escaped, one line."""
    value = " ".join(str(value).split())
    return _MD_SPECIAL.sub(r"\\\1", html.escape(value, quote=False))


def _code(value: str) -> str:
    """An inline code span that survives a table cell (``|`` cannot be escaped inside code)."""
    value = " ".join(str(value).split())
    if "|" in value:
        return "<code>" + html.escape(value).replace("|", "&#124;") + "</code>"
    ticks = "``" if "`" in value else "`"
    pad = " " if "`" in value else ""
    return f"{ticks}{pad}{value}{pad}{ticks}"


def _subparsers(parser: argparse.ArgumentParser) -> list[tuple[str, str, argparse.ArgumentParser]]:
    """(name, help, parser) of each subcommand of ``parser``, in declaration order (aliases once)."""
    out = []
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help or "" for a in action._choices_actions}
            seen = set()
            for name, sub in action.choices.items():
                if id(sub) in seen:
                    continue
                seen.add(id(sub))
                out.append((name, helps.get(name, ""), sub))
    return out


def _argument(action: argparse.Action, formatter: argparse.HelpFormatter) -> tuple[str, str, str]:
    """(argument, default, description) cells of one argparse action."""
    if action.option_strings:
        metavar = ""
        if action.nargs != 0:
            metavar = formatter._format_args(action, formatter._get_default_metavar_for_optional(action))
        name = ", ".join(_code(f"{opt} {metavar}".strip()) for opt in action.option_strings)
    else:
        name = _code(formatter._format_args(action, formatter._get_default_metavar_for_positional(action)))
    help_text = formatter._expand_help(action) if action.help else ""
    notes = []
    if action.choices is not None and action.metavar is not None:  # else the metavar lists them
        notes.append("one of " + ", ".join(_code(str(c)) for c in action.choices))
    if (
        isinstance(action, (argparse._AppendAction, argparse._AppendConstAction, argparse._CountAction))
        and "repeatable" not in help_text
    ):
        notes.append("repeatable")
    if action.option_strings and action.required:
        notes.append("**required**")
    description = _text(help_text)
    if notes:
        description = f"{description} ({'; '.join(notes)})" if description else "; ".join(notes).capitalize()
    default = ""
    if action.option_strings and action.nargs != 0 and action.default not in (None, argparse.SUPPRESS):
        default = _code(
            " ".join(map(str, action.default)) if isinstance(action.default, (list, tuple)) else str(action.default)
        )
    return name, default, description


def _arguments_tables(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser._get_formatter()
    lines = []
    for group in parser._action_groups:
        rows = [
            a
            for a in group._group_actions
            if a.help != argparse.SUPPRESS and not isinstance(a, (argparse._HelpAction, argparse._SubParsersAction))
        ]
        if not rows:
            continue
        lines += [
            "",
            f"**{_text(group.title or 'arguments').capitalize()}**",
            "",
            "| argument | default | description |",
            "|---|---|---|",
        ]
        lines += ["| {} | {} | {} |".format(*_argument(a, formatter)) for a in rows]
    return lines


WIDTH = 100  # usage lines wrap here, whatever the terminal of the build


def _usage(parser: argparse.ArgumentParser) -> list[str]:
    formatter = parser.formatter_class(prog=parser.prog, width=WIDTH)
    formatter.add_usage(parser.usage, parser._actions, parser._mutually_exclusive_groups, prefix="")
    return ["", "```text", textwrap.dedent(formatter.format_help()).strip("\n"), "```"]


def _section(path: str, help_text: str, parser: argparse.ArgumentParser, level: int) -> list[str]:
    lines = ["", f"{'#' * level} {path}", ""]
    if help_text:
        lines.append(_text(help_text[:1].upper() + help_text[1:]) + ".")
    if parser.description and parser.description != help_text:
        lines += ["", _text(parser.description)]
    lines += _usage(parser)
    lines += _arguments_tables(parser)
    for name, sub_help, sub in _subparsers(parser):
        lines += _section(f"{path} {name}", sub_help, sub, min(level + 1, 6))
    return lines


def render(parser: argparse.ArgumentParser, level: int = 2) -> str:
    """The reference of ``parser`` and all its subcommands as Markdown: a summary table of the
    subcommands, the top-level usage, then one section (heading ``level``) per subcommand."""
    prog = parser.prog
    subs = _subparsers(parser)
    lines = []
    if subs:
        lines += ["| command | what it does |", "|---|---|"]
        lines += [f"| [{_code(f'{prog} {name}')}](#{_anchor(f'{prog} {name}')}) | {_text(h)} |" for name, h, _ in subs]
    lines += _usage(parser)
    lines += _arguments_tables(parser)
    for name, sub_help, sub in subs:
        lines += _section(f"{prog} {name}", sub_help, sub, level)
    return "\n".join(lines).strip() + "\n"


def _anchor(title: str) -> str:
    """The id Python-Markdown's toc extension gives a heading (its default slugify)."""
    from markdown.extensions.toc import slugify

    return slugify(title, "-")


def _parser() -> argparse.ArgumentParser:
    from fhc_jax.cli import build_parser

    return build_parser()


def on_page_markdown(markdown: str, page, config, files) -> str:
    if page.file.src_uri != PAGE:
        return markdown
    from mkdocs.exceptions import PluginError

    if MARKER not in markdown:
        raise PluginError(f"docs/hooks/cli_reference.py: docs/{PAGE} lacks the marker {MARKER}")
    return markdown.replace(MARKER, render(_parser()))


def on_files(files, config):
    from mkdocs.exceptions import PluginError

    if files.get_file_from_path(PAGE) is None:
        raise PluginError(f"docs/hooks/cli_reference.py: docs/{PAGE} is missing")
    return files

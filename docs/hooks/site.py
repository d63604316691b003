"""MkDocs hooks of the documentation site (mkdocs.yml ``hooks:``), run at build time.

- The CLI reference: ``docs/cli.md`` holds the marker ``<!-- cli-reference -->``, replaced by
  the ``--help`` of ``python -m planner`` and of each subcommand, rendered from the argument
  parser itself (``PARSER`` below), so the page cannot drift from the code.
- The measured results: every ``benchmarks/results/*.md`` becomes a page under ``results/``
  (not in the nav; ``results/index.md``, generated, lists them), so the docs link to the
  records themselves and ``mkdocs build --strict`` fails on a link to a record that is gone.
- The API page: the docstrings' Sphinx roles (``:class:``) are dropped from the HTML.
- README.md's relative links: each must name a file of the repository (a warning, an error
  under ``--strict``), since the README is the site's doorway and is not built by MkDocs.
"""

from __future__ import annotations

import argparse
import importlib
import io
import logging
import os
import re
from contextlib import redirect_stdout
from pathlib import Path

from mkdocs.structure.files import File, Files, InclusionLevel

log = logging.getLogger("mkdocs.hooks.site")

# Where the command line's parser is built: (module, function of no arguments). The one
# place to change when the parser moves.
PARSER = ("planner._src.cli.parser", "build_parser")
CLI_MARKER = "<!-- cli-reference -->"
RESULTS_MARKER = "<!-- results-index -->"
HELP_WIDTH = "100"  # argparse wraps to $COLUMNS: fixed, so the page is the same everywhere


def _root(config) -> Path:
    return Path(config["config_file_path"]).resolve().parent


# ------------------------------------------------------------------------------ CLI


def _subcommands(parser: argparse.ArgumentParser):
    """(name, one-line help, subparser) for each subcommand, in the order they were added."""
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            helps = {a.dest: a.help for a in action._choices_actions}
            for name, sub in action.choices.items():
                yield name, helps.get(name) or "", sub


def _help(parser: argparse.ArgumentParser) -> str:
    out = io.StringIO()
    with redirect_stdout(out):
        parser.print_help()
    return out.getvalue().rstrip() + "\n"


def cli_reference() -> str:
    """The Markdown of every command's ``--help``, from the parser."""
    old = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = HELP_WIDTH
    try:
        module, function = PARSER
        parser = getattr(importlib.import_module(module), function)()
        parts = [
            "### `python -m planner`\n",
            f"```text\n{_help(parser)}```\n",
        ]
        for name, summary, sub in _subcommands(parser):
            parts.append(f"### `{name}`\n")
            if summary:
                parts.append(f"{summary[0].upper()}{summary[1:]}.\n")
            parts.append(f"```text\n{_help(sub)}```\n")
        return "\n".join(parts)
    finally:
        if old is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = old


# ------------------------------------------------------------------------------ results


def _results(config) -> list[Path]:
    return sorted((_root(config) / "benchmarks" / "results").glob("*.md"))


def _results_index(config) -> str:
    lines = [
        "| record | what it is |",
        "|---|---|",
    ]
    for path in _results(config):
        title = next(
            (ln.lstrip("#").strip() for ln in path.read_text().splitlines() if ln.startswith("#")),
            path.stem,
        )
        title = title.replace("|", "\\|")
        lines.append(f"| [{path.name}]({path.name}) | {title} |")
    return "\n".join(lines) + "\n"


_CODE_SPAN = re.compile(r"(`+)(?:.+?)\1")


def _escape_brackets(markdown: str) -> str:
    """Square brackets outside code, escaped: a record's ``relu2(r)[mlp_out]`` or
    ``x['layers']`` is text, not a reference link (the records hold no links; they are kept
    verbatim, so the escaping happens here)."""
    out, fence = [], None
    for line in markdown.splitlines(keepends=True):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None:
            if stripped.startswith(fence):
                fence = None
        else:
            pieces, last = [], 0
            for m in _CODE_SPAN.finditer(line):
                pieces.append(_escape_text(line[last : m.start()]))
                pieces.append(m.group(0))
                last = m.end()
            pieces.append(_escape_text(line[last:]))
            line = "".join(pieces)
        out.append(line)
    return "".join(out)


def _escape_text(text: str) -> str:
    return text.replace("[", "\\[").replace("]", "\\]")


_RECORD = re.compile(r"`(benchmarks/results/)?([\w.-]+\.md)`")


def _link_records(markdown: str, src_uri: str, records: set[str]) -> str:
    """Each `benchmarks/results/NAME.md` cited in a page's text (not in a code block) becomes
    a link to that record's page, so a citation of a record that is not there fails the
    strict build; a bare `NAME.md` too where it names a record."""
    up = "../" * src_uri.count("/")

    def link(m):
        if m.group(1) or m.group(2) in records:
            return f"[{m.group(0)}]({up}results/{m.group(2)})"
        return m.group(0)

    out, fence = [], None
    for line in markdown.splitlines(keepends=True):
        stripped = line.lstrip()
        if fence is None and stripped.startswith(("```", "~~~")):
            fence = stripped[:3]
        elif fence is not None:
            if stripped.startswith(fence):
                fence = None
        else:
            line = _RECORD.sub(link, line)
        out.append(line)
    return "".join(out)


# ------------------------------------------------------------------------------ README

_LINK = re.compile(r"\]\(([^)\s]+)\)")


def _check_readme(config) -> None:
    root = _root(config)
    readme = root / "README.md"
    if not readme.exists():
        return
    for target in _LINK.findall(readme.read_text()):
        if re.match(r"^[a-z][a-z0-9+.-]*:", target) or target.startswith("#"):
            continue  # a URL, or an anchor of the README itself
        path = target.split("#", 1)[0]
        if not (root / path).exists():
            log.warning("README.md links to '%s', which is not a file of the repository", target)


# ------------------------------------------------------------------------------ hooks


def on_config(config):
    _check_readme(config)
    return config


def on_files(files: Files, config) -> Files:
    for path in _results(config):
        files.append(
            File.generated(
                config,
                f"results/{path.name}",
                abs_src_path=str(path),
                inclusion=InclusionLevel.NOT_IN_NAV,  # listed by results/index.md
            )
        )
    index = (
        "# Results records\n\n"
        "Every measurement the documentation quotes, as recorded with its command and date "
        "(`benchmarks/results/` in the repository; folders of raw traces and JSON beside "
        "them are not part of the site).\n\n" + RESULTS_MARKER + "\n"
    )
    files.append(File.generated(config, "results/index.md", content=index))
    return files


_SPHINX_ROLE = re.compile(r":(?:meth|class|func|attr|mod|obj|exc|data):(?=<code>)")


def on_page_content(html: str, page, config, files):
    """The docstrings' Sphinx roles (``:meth:`Planner.plan```) shown as the code they name."""
    if page.file.src_uri == "api.md":
        return _SPHINX_ROLE.sub("", html)
    return html


def on_page_markdown(markdown: str, page, config, files):
    src = page.file.src_uri
    if src == "cli.md":
        if CLI_MARKER not in markdown:
            log.warning(
                "docs/cli.md lost its marker %s: the CLI reference is not generated", CLI_MARKER
            )
        markdown = markdown.replace(CLI_MARKER, cli_reference())
    elif src == "results/index.md":
        return markdown.replace(RESULTS_MARKER, _results_index(config))
    if src.startswith("results/"):
        return _escape_brackets(markdown)
    return _link_records(markdown, src, {p.name for p in _results(config)})

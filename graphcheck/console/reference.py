"""The reference pages of the documentation, generated from the code they describe: every
command and flag (from the parser the command line runs), every configuration key (from
the option declarations and the configuration's own keys), every rule (from the rules'
docs, one page each). The site's build writes them (``docs/gen_pages.py``, which adds
the op table from the op registry); none is committed, so none can drift.

>>> "## `graphcheck verify`" in cli_markdown()
True
>>> sorted(p for p in pages() if p.startswith("reference/rules/"))[:2]
['reference/rules/GC101.md', 'reference/rules/GC102.md']
"""

from __future__ import annotations

import argparse

__all__ = [
    "cli_markdown", "configuration_markdown", "pages", "rule_markdown", "rules_markdown",
    "schemas_markdown",
]  # fmt: skip


def pages() -> dict[str, str]:
    """Every generated page, by its path under ``docs/``."""
    from graphcheck import rules

    found = {
        "reference/cli.md": cli_markdown(),
        "reference/configuration.md": configuration_markdown(),
        "reference/rules/index.md": rules_markdown(),
        "reference/schemas.md": schemas_markdown(),
    }
    return found | {f"reference/rules/{r.code}.md": rule_markdown(r.code) for r in rules.INFO}


def cli_markdown() -> str:
    """Every command and flag of ``graphcheck``, with its help, as Markdown."""
    from graphcheck.cli import build_parser

    parser = build_parser()
    lines = [
        "# Command-line reference",
        "",
        "Generated from the parser `graphcheck` runs (`graphcheck/console/reference.py`);",
        "the model options are declared once in `graphcheck/options.py`.",
    ]
    for name, sub in _commands(parser):
        lines += ["", f"## `graphcheck {name}`", "", sub.description or _helps(parser)[name], ""]
        lines += _flags(sub)
    return "\n".join(lines) + "\n"


def configuration_markdown() -> str:
    """The keys of a ``[[checks]]`` table of ``[tool.graphcheck]``: the check's own and
    the model options (with their flags and API keywords)."""
    from graphcheck.options import reference_markdown
    from graphcheck.project.config import CHECK_KEY_HELP, TOP_KEYS

    lines = [
        "# Configuration reference",
        "",
        "`[tool.graphcheck]` in `pyproject.toml` (or the same keys at the top of a",
        "`graphcheck.toml`) holds `[[checks]]` tables. Top-level keys: "
        + ", ".join(f"`{k}`" for k in TOP_KEYS)
        + ".",
        "",
        "## A check's own keys",
        "",
        "| key | what it does |",
        "|---|---|",
        *(f"| `{k}` | {_escaped(text)} |" for k, text in CHECK_KEY_HELP.items()),
        "",
        "## The model options",
        "",
        "Each is declared once (`graphcheck/options.py`): its flag, its configuration key",
        "(`-`: a command-line flag only) and its keyword in the Python API.",
        "",
        reference_markdown().rstrip(),
    ]
    return "\n".join(lines) + "\n"


def schemas_markdown() -> str:
    """The JSON Schemas shipped in :mod:`graphcheck.schemas`, each in full."""
    import json

    from graphcheck.schemas import NAMES, schema

    lines = [
        "# JSON Schemas",
        "",
        "The schemas of the files graphcheck writes for machines ship with the package",
        "(`graphcheck.schemas.schema(name)`); the tests validate real output against them.",
    ]
    for name in NAMES:
        found = schema(name)
        lines += ["", f"## `{name}.schema.json`", "", found.get("description", ""), ""]
        lines += ["```json", json.dumps(found, indent=2), "```"]
    return "\n".join(lines) + "\n"


def rules_markdown() -> str:
    """The rule table, each code linking to its page."""
    from graphcheck import rules

    lines = [
        "# Rules",
        "",
        "Every finding has a code; `graphcheck rules CODE` prints the same page in a terminal.",
        "An error fails the verdict; a warning is reported and does not.",
        "",
        "| code | severity | name | summary |",
        "|---|---|---|---|",
    ]
    for r in rules.INFO:
        lines.append(
            f"| [{r.code}]({r.code}.md) | {r.severity} | {r.name} | {_escaped(r.summary)} |"
        )
    return "\n".join(lines) + "\n"


def rule_markdown(code: str) -> str:
    """One rule's page: its name, severity and summary, then its doc's sections."""
    from graphcheck import rules
    from graphcheck.reporters.sarif import doc_sections

    rule = next(r for r in rules.INFO if r.code == code)
    lines = [f"# {rule.code} {rule.name}", "", f"**{rule.severity}** · {rule.summary}"]
    for heading, body in doc_sections(rule.doc).items():
        lines += ["", f"## {heading}", "", body]
    return "\n".join(lines + _example(rule)) + "\n"


def _example(rule) -> list[str]:
    """The rule's violating model and its passing twin, as commands to run (the tests run
    the same two)."""
    example = rule.example
    if example is None:
        return []
    builder = example.get("stage_builder")
    twin = example.get("passing_stage_builder", builder)
    run = [
        _verify(example["violating"], example["cut"], builder) + f"   # {rule.code}",
        _verify(example["passing"], example["cut"], twin) + f"   # no {rule.code}",
    ]
    intro = "The violating fixture and its passing twin (`tests/rules/test_rule_table.py`):"
    return ["", "## Run it", "", intro, "", "```sh", *run, "```"]


def _verify(model: str, cut: int, builder: str | None) -> str:
    flags = f" --stage-builder {builder}" if builder else ""
    return f"graphcheck verify {model} --cuts {cut}{flags}"


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return list(action.choices.items())


def _helps(parser: argparse.ArgumentParser) -> dict[str, str]:
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return {choice.dest: choice.help or "" for choice in action._choices_actions}


def _flags(parser: argparse.ArgumentParser) -> list[str]:
    rows = ["| argument | what it does |", "|---|---|"]
    for action in parser._actions:
        if isinstance(action, argparse._HelpAction):
            continue
        rows.append(f"| `{_escaped(_spelled(action))}` | {_escaped(action.help or '')} |")
    return rows


def _spelled(action: argparse.Action) -> str:
    if not action.option_strings:
        return action.metavar or action.dest
    flag = ", ".join(action.option_strings)
    if action.nargs == 0:
        return flag
    if action.choices:
        return f"{flag} {{{','.join(map(str, action.choices))}}}"
    return f"{flag} {action.metavar or action.dest.upper()}"


def _escaped(text: str) -> str:
    return " ".join(text.replace("|", "\\|").split())

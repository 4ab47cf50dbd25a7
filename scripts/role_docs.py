#!/usr/bin/env python3
"""Generate each role's README variable table from its meta/argument_specs.yml.

The spec is the one source of a role's variables: for every role under roles/ that has a
``meta/argument_specs.yml``, the table of ``argument_specs.main.options`` (name, type with
elements, required, default, choices, description; nested ``options`` as ``parent.child``
rows, ``parent[].child`` for the elements of a list of dicts) is written into the role's
README.md between two marker comments. Everything outside the markers stays hand-written.

Usage::

    python scripts/role_docs.py            # rewrite every stale README
    python scripts/role_docs.py --check    # exit 1 naming every stale README, change nothing

Rendering rules (deterministic: same spec, same bytes):

- Markdown is escaped for table cells: ``|`` becomes ``\\|`` (also inside code spans, as GitHub
  tables need), ``<``, ``*``, a backtick and a backslash are escaped in prose; multi-line and list
  descriptions are joined into one line.
- Ansible markup in descriptions is turned into Markdown: C(), V(), O(), E(), M() -> code span,
  I() -> emphasis, B() -> strong, U() -> the URL, L(text,url) -> a link.
- Defaults are code spans: a string as it is (quoted only where YAML would read it as another
  type), anything else as YAML flow. A list or dict whose flow form is longer than
  ``LONG_DEFAULT`` characters is shown as a YAML block after the table instead.
- A README without markers gets the block appended; a missing README is created with the
  role's name and short_description.

Needs PyYAML and the standard library only.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import sys
from typing import Any

import yaml

BEGIN = "<!-- BEGIN role_docs: generated from meta/argument_specs.yml by scripts/role_docs.py; do not edit -->"
END = "<!-- END role_docs -->"
# The BEGIN marker is found by its prefix, so a reworded marker text is still replaced.
_BLOCK_RE = re.compile(r"<!-- BEGIN role_docs\b.*?-->.*?<!-- END role_docs -->", re.DOTALL)
# Flow form longer than this (characters) moves a list or dict default below the table.
LONG_DEFAULT = 80
REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROLES_DIR = os.path.join(REPO, "roles")
SPEC_PATH = os.path.join("meta", "argument_specs.yml")

_MARKUP_RE = re.compile(r"\b([CVOEMIBUL])\(([^()]*)\)")


class RoleDocsError(Exception):
    """A spec or README this script cannot handle; the message names the file and the problem."""


def load_spec(role_dir: str) -> dict[str, Any]:
    """Return ``argument_specs.main`` of the role at ``role_dir`` (a dict; ``options`` may be empty).

    Raises RoleDocsError naming the file when it has no ``argument_specs.main`` mapping.
    """
    path = os.path.join(role_dir, SPEC_PATH)
    with open(path, encoding="utf-8") as fh:
        data = yaml.safe_load(fh) or {}
    main = (data.get("argument_specs") or {}).get("main") if isinstance(data, dict) else None
    if not isinstance(main, dict):
        raise RoleDocsError(f"{path}: no argument_specs.main mapping")
    return main


def spec_roles(roles_dir: str = ROLES_DIR) -> list[str]:
    """Return the names of the roles under ``roles_dir`` that have a meta/argument_specs.yml, sorted."""
    return sorted(name for name in os.listdir(roles_dir) if os.path.isfile(os.path.join(roles_dir, name, SPEC_PATH)))


def _code(text: str) -> str:
    """Return ``text`` as a Markdown code span that is safe inside a table cell."""
    text = text.replace("|", "\\|")
    fence = "`"
    while fence in text:
        fence += "`"
    pad = " " if len(fence) > 1 else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def _escape_prose(text: str) -> str:
    """Escape the characters that plain text must not leak into Markdown (cell-safe)."""
    text = text.replace("\\", "\\\\")
    for char in ("`", "*", "|"):
        text = text.replace(char, "\\" + char)
    return text.replace("<", "&lt;")


def describe(description: Any) -> str:
    """Return a spec description (a string or a list of paragraphs) as one line of Markdown.

    Whitespace and line breaks are collapsed to single spaces; Ansible markup becomes Markdown
    (see the module docstring); everything else is escaped for a table cell.
    """
    if description is None:
        return ""
    if isinstance(description, list):
        description = " ".join(str(part) for part in description)
    text = " ".join(str(description).split())
    out: list[str] = []
    pos = 0
    for match in _MARKUP_RE.finditer(text):
        out.append(_escape_prose(text[pos : match.start()]))
        kind, body = match.group(1), match.group(2)
        if kind in "CVOEM":
            out.append(_code(body))
        elif kind == "I":
            out.append(f"*{_escape_prose(body)}*")
        elif kind == "B":
            out.append(f"**{_escape_prose(body)}**")
        elif kind == "U":
            out.append(f"<{body}>")
        else:  # L(text,url)
            label, _, url = body.partition(",")
            out.append(f"[{_escape_prose(label.strip())}]({url.strip()})")
        pos = match.end()
    out.append(_escape_prose(text[pos:]))
    return "".join(out)


def _flow(value: Any) -> str:
    """Return ``value`` in YAML flow style on one line (strings as they are where YAML agrees)."""
    if isinstance(value, str):
        try:
            same = yaml.safe_load(value) == value
        except yaml.YAMLError:
            same = False
        return value if same and value.strip() == value and value else json.dumps(value)
    dumped = yaml.safe_dump(value, default_flow_style=True, width=2**31, sort_keys=False, allow_unicode=True)
    return dumped.strip().removesuffix("...").strip()


def _is_long(value: Any) -> bool:
    return isinstance(value, (list, dict)) and len(_flow(value)) > LONG_DEFAULT


def type_name(option: dict[str, Any]) -> str:
    """Return the option's type as the table shows it: ``list of str``, ``dict``, ``str`` when unset."""
    kind = str(option.get("type", "str"))
    if kind == "list" and option.get("elements"):
        return f"list of {option['elements']}"
    return kind


def _rows(options: dict[str, Any], prefix: str, long_defaults: list[tuple[str, Any]]) -> list[str]:
    rows = []
    for name, option in options.items():
        option = option or {}
        full = f"{prefix}{name}"
        required = bool(option.get("required", False))
        if "default" in option and option["default"] is not None:
            default = option["default"]
            if _is_long(default):
                long_defaults.append((full, default))
                cell_default = "(below the table)"
            else:
                cell_default = _code(_flow(default))
        else:
            cell_default = "" if required else _code("null")
        choices = ", ".join(_code(_flow(choice)) for choice in option.get("choices") or [])
        cells = [
            _code(full),
            _escape_prose(type_name(option)),
            "yes" if required else "no",
            cell_default,
            choices,
            describe(option.get("description")),
        ]
        rows.append("| " + " | ".join(cells) + " |")
        children = option.get("options")
        if isinstance(children, dict) and children:
            sep = "[]." if option.get("type") == "list" else "."
            rows.extend(_rows(children, f"{full}{sep}", long_defaults))
    return rows


def render_block(spec: dict[str, Any]) -> str:
    """Return the generated README block (markers included, no trailing newline) for ``spec``.

    ``spec`` is ``argument_specs.main`` of one role.
    """
    long_defaults: list[tuple[str, Any]] = []
    # Blank lines around the content: the marker comments stay HTML blocks of their own.
    lines = [
        BEGIN,
        "",
        "| variable | type | required | default | choices | description |",
        "|---|---|---|---|---|---|",
    ]
    options = spec.get("options") or {}
    lines.extend(_rows(options, "", long_defaults))
    if not options:
        lines = [BEGIN, "", "This role has no variables."]
    for name, value in long_defaults:
        dumped = yaml.safe_dump(
            {name: value}, default_flow_style=False, width=100, sort_keys=False, allow_unicode=True
        ).rstrip("\n")
        lines.extend(["", f"Default of {_code(name)}:", "", "```yaml", dumped, "```"])
    lines.extend(["", END])
    return "\n".join(lines)


def update_readme(text: str | None, block: str, role: str, short_description: str = "") -> str:
    """Return README text with ``block`` in place of the generated part.

    ``text`` None (no README) gives a new README: a title, the short description and the block.
    A README without markers gets the block appended. Raises RoleDocsError when the README has
    a BEGIN marker without its END, or more than one block.
    """
    if text is None:
        intro = f"{short_description.strip().rstrip('.')}.\n\n" if short_description else ""
        return f"# {role}\n\n{intro}{block}\n"
    blocks = _BLOCK_RE.findall(text)
    if len(blocks) > 1:
        raise RoleDocsError(f"roles/{role}/README.md: {len(blocks)} role_docs blocks, expected one")
    if not blocks:
        if "<!-- BEGIN role_docs" in text or END in text:
            raise RoleDocsError(f"roles/{role}/README.md: a role_docs marker without its partner")
        return text.rstrip("\n") + "\n\n" + block + "\n"
    return _BLOCK_RE.sub(lambda _match: block, text, count=1)


def _plan(roles_dir: str) -> list[tuple[str, str, str | None, str]]:
    """Return (role, README path, current text or None, wanted text) for every spec'd role."""
    plan = []
    for role in spec_roles(roles_dir):
        role_dir = os.path.join(roles_dir, role)
        spec = load_spec(role_dir)
        path = os.path.join(role_dir, "README.md")
        current = None
        if os.path.exists(path):
            with open(path, encoding="utf-8") as fh:
                current = fh.read()
        wanted = update_readme(current, render_block(spec), role, str(spec.get("short_description") or ""))
        plan.append((role, path, current, wanted))
    return plan


def stale_readmes(roles_dir: str = ROLES_DIR) -> list[str]:
    """Return the README paths (relative to the roles' parent folder) whose generated part is stale.

    A missing README, or one without the marker block, is stale too.
    """
    base = os.path.dirname(os.path.abspath(roles_dir))
    return [os.path.relpath(path, base) for _, path, current, wanted in _plan(roles_dir) if current != wanted]


def write_readmes(roles_dir: str = ROLES_DIR) -> list[str]:
    """Rewrite every stale README; return the paths written (relative to the roles' parent folder)."""
    base = os.path.dirname(os.path.abspath(roles_dir))
    written = []
    for _, path, current, wanted in _plan(roles_dir):
        if current != wanted:
            with open(path, "w", encoding="utf-8") as fh:
                fh.write(wanted)
            written.append(os.path.relpath(path, base))
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--check", action="store_true", help="change nothing; exit 1 naming every stale README")
    parser.add_argument("--roles-dir", default=ROLES_DIR, help="folder of the roles (default: roles/ of this repo)")
    args = parser.parse_args(argv)
    try:
        if args.check:
            stale = stale_readmes(args.roles_dir)
            for path in stale:
                print(f"{path}: stale variable table; run python scripts/role_docs.py", file=sys.stderr)
            return 1 if stale else 0
        for path in write_readmes(args.roles_dir):
            print(f"wrote {path}")
    except (RoleDocsError, OSError, yaml.YAMLError) as exc:
        print(f"role_docs: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())

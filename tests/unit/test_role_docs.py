"""Role documentation has one source: meta/argument_specs.yml.

Every README's variable table is the one scripts/role_docs.py generates from the spec, and the
spec agrees with defaults/main.yml. The rule for null: a variable whose default in
defaults/main.yml is null has no ``default:`` in the spec (Ansible reads a missing default as
null); ``default: null`` is never written.
"""

from __future__ import annotations

import os
import textwrap
from typing import Any

import pytest
import yaml
from conftest import load_source

import ncclprep

REPO = ncclprep.REPO_ROOT
role_docs = load_source("role_docs", "scripts/role_docs.py")

ROLES_DIR = os.path.join(REPO, "roles")
ROLES = role_docs.spec_roles(ROLES_DIR)
TYPES = {"str", "path", "int", "float", "bool", "list", "dict", "raw", "bits", "bytes", "json", "jsonarg"}


def _defaults(role: str) -> dict[str, Any]:
    path = os.path.join(ROLES_DIR, role, "defaults", "main.yml")
    if not os.path.exists(path):
        return {}
    with open(path, encoding="utf-8") as fh:
        return yaml.safe_load(fh) or {}


def _options(role: str) -> dict[str, Any]:
    return role_docs.load_spec(os.path.join(ROLES_DIR, role)).get("options") or {}


def _same(a: Any, b: Any) -> bool:
    """Equal values of the same kind: True is not 1, 5 is 5.0, dict order does not matter."""
    if isinstance(a, bool) or isinstance(b, bool):
        return type(a) is type(b) and a == b
    if isinstance(a, (int, float)) and isinstance(b, (int, float)):
        return a == b
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list) and isinstance(b, list):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _walk(options: dict[str, Any], prefix: str = ""):
    """Yield (dotted name, option) for every option, nested ones included."""
    for name, option in options.items():
        yield f"{prefix}{name}", option or {}
        children = (option or {}).get("options")
        if isinstance(children, dict):
            yield from _walk(children, f"{prefix}{name}.")


def _fits_type(value: Any, kind: str) -> bool:
    if isinstance(value, str) and "{{" in value:
        return True  # a template: its type shows only once rendered
    checks = {
        "bool": lambda v: isinstance(v, bool),
        "int": lambda v: isinstance(v, int) and not isinstance(v, bool),
        "float": lambda v: isinstance(v, (int, float)) and not isinstance(v, bool),
        "str": lambda v: isinstance(v, str),
        "path": lambda v: isinstance(v, str),
        "list": lambda v: isinstance(v, list),
        "dict": lambda v: isinstance(v, dict),
    }
    return checks.get(kind, lambda v: True)(value)


def test_every_readme_variable_table_is_generated_from_the_current_spec():
    stale = role_docs.stale_readmes(ROLES_DIR)
    assert stale == [], f"stale READMEs {stale}: run python scripts/role_docs.py"


def test_roles_with_an_argument_spec_are_found():
    assert "data_plane" in ROLES and "preflight" in ROLES


@pytest.mark.parametrize("role", ROLES)
def test_every_option_has_a_type_a_description_and_list_elements(role):
    problems = []
    for name, option in _walk(_options(role)):
        kind = option.get("type")
        if kind not in TYPES:
            problems.append(f"{name}: type {kind!r} missing or unknown")
        if not option.get("description"):
            problems.append(f"{name}: no description")
        if kind == "list" and not option.get("elements"):
            problems.append(f"{name}: list without elements")
        if "default" in option and option["default"] is None:
            problems.append(f"{name}: default: null written out; leave default away (null is the default)")
        if "default" in option and option["default"] is not None and not _fits_type(option["default"], kind):
            problems.append(f"{name}: default {option['default']!r} is not a {kind}")
        choices = option.get("choices")
        if choices and option.get("default") is not None:
            values = option["default"] if kind == "list" else [option["default"]]
            if any(v not in choices for v in values):
                problems.append(f"{name}: default {option['default']!r} not in choices {choices}")
    assert problems == [], f"roles/{role}/meta/argument_specs.yml: {problems}"


@pytest.mark.parametrize("role", ROLES)
def test_every_variable_in_defaults_is_an_option_of_the_spec(role):
    extra = sorted(set(_defaults(role)) - set(_options(role)))
    assert extra == [], f"roles/{role}: in defaults/main.yml but not in meta/argument_specs.yml: {extra}"


@pytest.mark.parametrize("role", ROLES)
def test_every_optional_option_has_its_default_in_defaults(role):
    defaults = _defaults(role)
    missing = sorted(
        name for name, option in _options(role).items() if not (option or {}).get("required") and name not in defaults
    )
    assert missing == [], f"roles/{role}: optional in meta/argument_specs.yml but not in defaults/main.yml: {missing}"


@pytest.mark.parametrize("role", ROLES)
def test_spec_defaults_equal_defaults_main(role):
    defaults = _defaults(role)
    problems = []
    for name, option in _options(role).items():
        if name not in defaults:
            continue
        spec_default = (option or {}).get("default")
        if not _same(spec_default, defaults[name]):
            problems.append(f"{name}: spec {spec_default!r} != defaults {defaults[name]!r}")
    assert problems == [], f"roles/{role}: {problems}"


# The renderer itself, on made-up specs.

SPEC = yaml.safe_load(
    textwrap.dedent(
        """
        short_description: A made-up role
        options:
          demo_mode:
            type: str
            default: a|b
            choices: [a|b, c]
            description:
              - First line with a pipe | and <tag>
                continued here.
              - C(code | span) and I(this) matter.
          demo_required: {type: str, required: true, description: Must be set.}
          demo_unset: {type: int, description: Null by default.}
          demo_list: {type: list, elements: str, default: [x, y], description: A list.}
          demo_long:
            type: dict
            default: {alpha_key_number_one: 1, alpha_key_number_two: 2, alpha_key_number_three: 3, alpha_four: 4}
            description: A long default.
          demo_version: {type: str, default: "2.0", description: Looks like a float.}
          demo_rule:
            type: dict
            description: A nested dict.
            options:
              port: {type: int, default: 22, description: The port.}
          demo_rules:
            type: list
            elements: dict
            default: []
            description: Nested list of dicts.
            options:
              from: {type: str, required: true, description: CIDR.}
        """
    )
)


def _row(block: str, name: str) -> str:
    return next(line for line in block.splitlines() if line.startswith(f"| `{name}` |"))


def test_pipes_in_text_defaults_choices_and_code_spans_are_escaped():
    row = _row(role_docs.render_block(SPEC), "demo_mode")
    assert row.count(" | ") == 5  # exactly six cells: every literal pipe is escaped
    assert "`a\\|b`" in row and "`code \\| span`" in row and "pipe \\| and" in row


def test_multi_line_and_list_descriptions_become_one_line_and_html_is_escaped():
    row = _row(role_docs.render_block(SPEC), "demo_mode")
    assert "&lt;tag> continued here. `code" in row and "*this*" in row


def test_required_unset_and_quoted_defaults_are_shown():
    block = role_docs.render_block(SPEC)
    assert _row(block, "demo_required") == "| `demo_required` | str | yes |  |  | Must be set. |"
    assert "| no | `null` |" in _row(block, "demo_unset")
    assert "| list of str | no | `[x, y]` |" in _row(block, "demo_list")
    assert '`"2.0"`' in _row(block, "demo_version")


def test_long_defaults_go_below_the_table_as_yaml():
    block = role_docs.render_block(SPEC)
    assert "(below the table)" in _row(block, "demo_long")
    assert "Default of `demo_long`:\n\n```yaml\ndemo_long:\n  alpha_key_number_one: 1\n" in block


def test_nested_options_are_rows_named_parent_dot_child():
    block = role_docs.render_block(SPEC)
    assert "| int | no | `22` |" in _row(block, "demo_rule.port")
    assert "| str | yes |" in _row(block, "demo_rules[].from")


def test_update_keeps_the_hand_written_prose_and_is_idempotent():
    block = role_docs.render_block(SPEC)
    old = f"# demo\n\nProse above.\n\n{role_docs.BEGIN}\nold table\n{role_docs.END}\n\nProse below.\n"
    new = role_docs.update_readme(old, block, "demo")
    assert new == f"# demo\n\nProse above.\n\n{block}\n\nProse below.\n"
    assert role_docs.update_readme(new, block, "demo") == new


def test_readme_without_markers_gets_the_block_appended_and_a_missing_one_is_created():
    block = role_docs.render_block(SPEC)
    assert role_docs.update_readme("# demo\n\nProse.\n", block, "demo") == f"# demo\n\nProse.\n\n{block}\n"
    assert role_docs.update_readme(None, block, "demo", "A made-up role") == f"# demo\n\nA made-up role.\n\n{block}\n"


def test_a_begin_marker_without_its_end_is_refused():
    with pytest.raises(role_docs.RoleDocsError, match="without its partner"):
        role_docs.update_readme(f"# demo\n{role_docs.BEGIN}\n", "block", "demo")


def test_check_names_a_stale_readme_and_write_fixes_it(tmp_path, capsys):
    role = tmp_path / "roles" / "demo"
    (role / "meta").mkdir(parents=True)
    (role / "meta" / "argument_specs.yml").write_text(yaml.safe_dump({"argument_specs": {"main": SPEC}}))
    (role / "README.md").write_text(f"# demo\n\n{role_docs.BEGIN}\n{role_docs.END}\n")
    roles = str(tmp_path / "roles")
    assert role_docs.main(["--check", "--roles-dir", roles]) == 1
    assert "roles/demo/README.md: stale" in capsys.readouterr().err
    assert role_docs.main(["--roles-dir", roles]) == 0
    assert role_docs.main(["--check", "--roles-dir", roles]) == 0

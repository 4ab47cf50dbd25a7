"""Every module's DOCUMENTATION, EXAMPLES and RETURN parse as Ansible reads them (ansible-doc
refuses the whole module otherwise), and DOCUMENTATION documents exactly the argument spec."""

from __future__ import annotations

import ast
import glob
import importlib
import os

import pytest
import yaml

import ncclprep

REPO = ncclprep.REPO_ROOT
MODULES = sorted(glob.glob(os.path.join(REPO, "library", "*.py")))
BLOCKS = ("DOCUMENTATION", "EXAMPLES", "RETURN")


def doc_blocks(source: str) -> dict[str, str]:
    """The module-level string constants DOCUMENTATION, EXAMPLES and RETURN of a module's source."""
    out = {}
    for node in ast.parse(source).body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            for target in node.targets:
                if isinstance(target, ast.Name) and target.id in BLOCKS:
                    out[target.id] = node.value.value
    return out


def spec_options(source: str) -> list[str]:
    """Option names of ``AnsibleModule(argument_spec=dict(...))`` in a module's source; a
    ``**NAME`` in it takes the keywords of the module-level ``NAME = dict(...)``, a
    ``**ALIAS.NAME`` the keys of NAME in the module_utils module imported as ALIAS."""
    tree = ast.parse(source)
    named = {node.targets[0].id: node.value for node in tree.body if isinstance(node, ast.Assign)
             and isinstance(node.targets[0], ast.Name) and isinstance(node.value, ast.Call)}
    aliases = {a.asname or a.name: f"{node.module}.{a.name}" for node in tree.body
               if isinstance(node, ast.ImportFrom) and node.module for a in node.names}

    def spread(value) -> list[str]:
        if isinstance(value, ast.Attribute):
            return list(getattr(importlib.import_module(aliases[value.value.id]), value.attr))
        return [inner.arg for inner in named[value.id].keywords]

    for node in ast.walk(tree):
        if isinstance(node, ast.keyword) and node.arg == "argument_spec" and isinstance(node.value, ast.Call):
            return [kw.arg for kw in node.value.keywords if kw.arg] + [
                name for kw in node.value.keywords if kw.arg is None for name in spread(kw.value)]
    raise AssertionError("no argument_spec=dict(...)")


def bad_descriptions(tree, where: str = "") -> list[str]:
    """Paths of every ``description`` that is not a string or a list of strings (an unquoted
    ``: `` in a description makes YAML read a mapping there)."""
    bad = []
    if isinstance(tree, dict):
        for key, value in tree.items():
            path = f"{where}.{key}" if where else str(key)
            if key == "description" and not (isinstance(value, str) or
                                              (isinstance(value, list) and all(isinstance(v, str) for v in value))):
                bad.append(path)
            else:
                bad += bad_descriptions(value, path)
    elif isinstance(tree, list):
        for i, value in enumerate(tree):
            bad += bad_descriptions(value, f"{where}[{i}]")
    return bad


def read(path: str) -> str:
    with open(path, encoding="utf-8") as fh:
        return fh.read()


@pytest.mark.parametrize("path", MODULES, ids=lambda p: os.path.basename(p))
def test_documentation_examples_and_return_parse_and_describe_in_text(path):
    name = os.path.basename(path).removesuffix(".py")
    blocks = doc_blocks(read(path))
    assert sorted(blocks) == sorted(BLOCKS), f"{name}: has {sorted(blocks)}"
    parsed = {k: yaml.safe_load(v) for k, v in blocks.items()}
    assert isinstance(parsed["DOCUMENTATION"], dict) and parsed["DOCUMENTATION"]["module"] == name
    assert isinstance(parsed["EXAMPLES"], list) and parsed["EXAMPLES"], f"{name}: EXAMPLES is not a task list"
    assert isinstance(parsed["RETURN"], dict), f"{name}: RETURN is not a mapping"
    assert bad_descriptions(parsed["DOCUMENTATION"]) + bad_descriptions(parsed["RETURN"]) == [], name


@pytest.mark.parametrize("path", MODULES, ids=lambda p: os.path.basename(p))
def test_documentation_options_are_the_argument_spec(path):
    source = read(path)
    documented = yaml.safe_load(doc_blocks(source)["DOCUMENTATION"]).get("options") or {}
    assert sorted(documented) == sorted(spec_options(source)), os.path.basename(path)


def test_a_colon_in_an_unquoted_description_is_caught():
    doc = yaml.safe_load("module: x\ndescription:\n  - Runs on the controller (C(delegate_to: localhost)).\n")
    assert bad_descriptions(doc) == ["description"]
    assert bad_descriptions(yaml.safe_load('description:\n  - "Runs (C(delegate_to: localhost))."\n')) == []

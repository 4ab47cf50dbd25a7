"""The layout in docs/layout.md lists what exists, and nothing that does not; the README stays a
user guide of at most 250 lines (issue 24), its reference pages linked and present."""

from __future__ import annotations

import os
import re

import ncclprep

REPO = ncclprep.REPO_ROOT


def layout_block() -> str:
    with open(os.path.join(REPO, "docs", "layout.md"), encoding="utf-8") as fh:
        text = fh.read()
    section = text[text.index("## How the house is laid out"):]
    return section[section.index("```") + 3:section.index("```", section.index("```") + 3)]


def listed_paths(block: str) -> list[str]:
    """First-column entries (``a, b`` lists split; ``roles/<concern>/`` placeholders left out)."""
    paths = []
    for line in block.splitlines():
        if not line.strip() or line.startswith(" "):
            continue
        head = re.split(r"\s{2,}", line.strip())[0]
        paths += [p.strip() for p in head.split(",") if "<" not in p]
    return paths


def test_every_path_the_layout_lists_exists():
    paths = listed_paths(layout_block())
    assert len(paths) > 10
    assert [p for p in paths if not os.path.exists(os.path.join(REPO, p))] == []


def test_every_module_and_top_folder_is_in_the_layout():
    block = layout_block()
    for name in sorted(os.listdir(os.path.join(REPO, "library"))):
        assert name.removesuffix(".py") in block, f"library/{name} missing from docs/layout.md"
    for name in sorted(os.listdir(os.path.join(REPO, "module_utils", "ncclprep"))):
        if name.startswith("__"):
            continue
        assert name.removesuffix(".py") in block, f"module_utils/ncclprep/{name} missing from docs/layout.md"
    for name in ("playbooks", "roles", "library", "module_utils", "filter_plugins", "src", "scripts", "tests",
                 "inventory"):
        assert re.search(rf"^{name}/", block, re.M), f"{name}/ missing"


def test_the_layout_check_catches_a_path_that_does_not_exist():
    assert listed_paths("bench/   benchmarks\nsite.yml, nope.yml  x\n") == ["bench/", "site.yml", "nope.yml"]


def test_the_readme_is_a_guide_whose_links_resolve():
    with open(os.path.join(REPO, "README.md"), encoding="utf-8") as fh:
        text = fh.read()
    assert len(text.splitlines()) <= 250
    links = re.findall(r"\]\(((?:docs|roles|inventory)/[^)#\s]+)", text)
    assert "docs/layout.md" in links and "docs/checks.md" in links
    assert [link for link in links if not os.path.exists(os.path.join(REPO, link))] == []

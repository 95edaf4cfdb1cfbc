"""The options the README and the man pages list for each program are the
ones its --help lists: a doc that lists an option the program lacks, or
lacks one it has, fails here (the README's lists had drifted: --no-shm
missing, five of mooncake-cli's options)."""

import os
import re
import subprocess

import pytest

from harness import CLI, DAEMON, MASTER, ROOT

OPTION = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*[a-z0-9]")

# program, its binary, the README heading whose first code block lists its
# options, its man page
PROGRAMS = [
    ("mooncake-master", MASTER, "## mooncake-master options", "mooncake-master.8.scd"),
    ("mooncake-fs", DAEMON, "## mooncake-fs options", "mooncake-fs.8.scd"),
    ("mooncake-cli", CLI, "## mooncake-cli", "mooncake-cli.1.scd"),
]

# What --help names that is not an option of the program: none so far.
NOT_OPTIONS = {"--help", "--version"}


def help_options(binary):
    r = subprocess.run([binary, "--help"], capture_output=True, text=True, timeout=10)
    assert r.returncode == 0, r.stderr
    return set(OPTION.findall(r.stdout + r.stderr)) - NOT_OPTIONS


def readme_block(heading):
    text = open(os.path.join(ROOT, "README.md"), encoding="utf-8").read()
    at = text.index("\n" + heading + "\n")
    start = text.index("```", at)
    end = text.index("```", start + 3)
    return text[start + 3:end]


def man_options(page):
    text = open(os.path.join(ROOT, "docs", "man", page), encoding="utf-8").read()
    # scdoc marks an option as *--name*; prose may name options of other
    # programs, so only the marked ones that start a line count.
    return {m.group(1) for m in re.finditer(r"^\*(--[a-z][a-z0-9-]*)\*", text, re.M)} - NOT_OPTIONS


@pytest.mark.parametrize("name,binary,heading,page", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_readme_lists_the_options_of_help(name, binary, heading, page):
    want = help_options(binary)
    assert want, f"{name} --help names no option"
    got = set(OPTION.findall(readme_block(heading))) - NOT_OPTIONS
    assert got - want == set(), f"README lists options {name} does not have"
    assert want - got == set(), f"README does not list these options of {name}"


@pytest.mark.parametrize("name,binary,heading,page", PROGRAMS, ids=[p[0] for p in PROGRAMS])
def test_man_page_lists_the_options_of_help(name, binary, heading, page):
    want = help_options(binary)
    got = man_options(page)
    assert got - want == set(), f"{page} lists options {name} does not have"
    assert want - got == set(), f"{page} does not list these options of {name}"

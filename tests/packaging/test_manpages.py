"""The man pages (docs/man/*.scd, scdoc) against what they document, so
that they never drift: every long option a program's --help names is an
option the man page describes, and every option the man page describes is
one --help names (--help and --version may be left out of the usage
text); the README's option list of each program the same (it had drifted:
--no-shm and five of mooncake-cli's options missing); every function the public headers declare is in libmooncake(3) and
every function libmooncake(3) names is declared. scdoc must render each
page. Run by `make test-packaging` (MC_BUILD: the build with the programs)."""

import os
import re
import shutil
import subprocess

import pytest

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
BUILD = os.path.join(ROOT, os.environ.get("MC_BUILD", "build"))
MAN = os.path.join(ROOT, "docs", "man")
HEADERS = [os.path.join(ROOT, "core", "include", "mooncake", h) for h in ("mooncake.h", "tasks.h", "loop.h", "metrics.h")]

PAGES = {"mooncake-fs": "mooncake-fs.8.scd", "mooncake-master": "mooncake-master.8.scd",
         "mooncake-cli": "mooncake-cli.1.scd"}
ALWAYS = {"--help", "--version"}


def read(path):
    with open(path) as f:
        return f.read()


def help_options(program):
    """The long options in `program --help` (usage lines included)."""
    out = subprocess.run([os.path.join(BUILD, program), "--help"], capture_output=True,
                         text=True, timeout=30)
    assert out.returncode == 0, out.stderr
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", out.stdout))


def page_options(page):
    """The long options a man page describes: the terms of its OPTIONS list,
    lines such as '*--listen* _ADDR_' or '*-h*, *--help*'."""
    text = read(os.path.join(MAN, page))
    section = text.split("# OPTIONS", 1)[1].split("\n# ", 1)[0]
    terms = [line for line in section.splitlines() if line.startswith("*-")]
    return {o for line in terms for o in re.findall(r"\*(--[a-z][a-z0-9-]*)\*", line)}


@pytest.mark.parametrize("program", sorted(PAGES))
def test_every_option_in_help_is_in_the_man_page(program):
    missing = help_options(program) - page_options(PAGES[program])
    assert not missing, f"{program} --help names {sorted(missing)}; describe them in " \
                        f"docs/man/{PAGES[program]}"


@pytest.mark.parametrize("program", sorted(PAGES))
def test_every_option_in_the_man_page_is_in_help(program):
    extra = page_options(PAGES[program]) - help_options(program) - ALWAYS
    assert not extra, f"docs/man/{PAGES[program]} describes {sorted(extra)}, which " \
                      f"{program} --help does not name"


# The README's heading whose first code block lists each program's options.
README_BLOCKS = {"mooncake-fs": "## mooncake-fs options",
                 "mooncake-master": "## mooncake-master options",
                 "mooncake-cli": "## mooncake-cli"}


def readme_options(program):
    """The long options in the README's code block for program."""
    text = read(os.path.join(ROOT, "README.md"))
    at = text.index("\n" + README_BLOCKS[program] + "\n")
    start = text.index("```", at)
    block = text[start + 3:text.index("```", start + 3)]
    return set(re.findall(r"(?<![\w-])--[a-z][a-z0-9-]*", block))


@pytest.mark.parametrize("program", sorted(PAGES))
def test_every_option_in_help_is_in_the_readme(program):
    missing = help_options(program) - readme_options(program) - ALWAYS
    assert not missing, f"{program} --help names {sorted(missing)}; list them in README.md " \
                        f"under '{README_BLOCKS[program]}'"


@pytest.mark.parametrize("program", sorted(PAGES))
def test_every_option_in_the_readme_is_in_help(program):
    extra = readme_options(program) - help_options(program) - ALWAYS
    assert not extra, f"README.md lists {sorted(extra)} under '{README_BLOCKS[program]}', " \
                      f"which {program} --help does not name"


def declared_functions():
    """The functions the public headers export (MC_EXPORT ... mc_name(...))."""
    names = set()
    for h in HEADERS:
        text = re.sub(r"/\*.*?\*/", "", read(h), flags=re.S)
        names |= set(re.findall(r"MC_EXPORT\s[^;{]*?\b(mc_\w+)\s*\(", text))
    return names


def test_libmooncake_3_names_every_function_and_no_other():
    page = set(re.findall(r"\*(mc_\w+)\*\(\)", read(os.path.join(MAN, "libmooncake.3.scd"))))
    declared = declared_functions()
    assert len(declared) > 40
    assert not declared - page, f"describe {sorted(declared - page)} in docs/man/libmooncake.3.scd"
    assert not page - declared, f"libmooncake(3) names {sorted(page - declared)}, not declared"


@pytest.mark.parametrize("page", sorted(os.listdir(MAN)))
def test_scdoc_renders(page):
    if not shutil.which("scdoc"):
        pytest.skip("scdoc is not installed (packaging/deps.sh installs it)")
    with open(os.path.join(MAN, page), "rb") as f:
        out = subprocess.run(["scdoc"], stdin=f, capture_output=True, timeout=30)
    assert out.returncode == 0, out.stderr.decode()
    assert out.stdout.startswith(b".\\\" Generated by scdoc")

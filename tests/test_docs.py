"""The documentation: the Sphinx build with warnings as errors, and every relative link of the Markdown pages."""

import re
import shutil
import sys
from pathlib import Path

import pytest

from tests.commands import run_command

REPO_ROOT = Path(__file__).resolve().parents[1]
DOCS = REPO_ROOT / "docs"
CLASSES = ["IMPACT", "IMPALA", "PPOAMBER", "VRACER", "PTRPPO", "SACReFER", "TD3ReFER"]
PAGE_SECTIONS = ["## Notes", "## Can I use?", "## Example", "## Results", "## How to replicate", "## Parameters"]
# [text](target) outside code; the target up to a space or the closing parenthesis.
MARKDOWN_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")


def markdown_pages() -> list[Path]:
    pages = [REPO_ROOT / "README.md", REPO_ROOT / "CHANGELOG.md", *DOCS.rglob("*.md")]
    return [page for page in pages if DOCS / "_build" not in page.parents and DOCS / "benchmarks" not in page.parents]


def without_code(text: str) -> str:
    text = re.sub(r"```.*?```", "", text, flags=re.DOTALL)
    return re.sub(r"`[^`\n]*`", "", text)


@pytest.mark.timeout(660)  # past the build's own 600 s limit, which reports with its output (run_command)
def test_sphinx_build_with_warnings_as_errors(tmp_path):
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    command = [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(DOCS), str(tmp_path / "html")]
    result = run_command(command, cwd=REPO_ROOT, timeout=600)
    assert result.returncode == 0, result.stdout[-4000:] + result.stderr[-8000:]
    for name in ["impact", "impala", "ppo_amber", "vracer", "ptr_ppo", "sac_refer", "td3_refer"]:
        assert (tmp_path / "html" / "algorithms" / f"{name}.html").is_file()


def relative_links(page: Path) -> list[tuple[str, Path]]:
    """Each relative link of a page outside code, with the path it points to (no URL, no in-page anchor)."""
    return [
        (target, page.parent / target.split("#", 1)[0])
        for target in MARKDOWN_LINK.findall(without_code(page.read_text()))
        if not (re.match(r"[a-z]+:", target) or target.startswith("#"))
    ]


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_relative_links_point_to_files_that_exist(page):
    missing = [target for target, path in relative_links(page) if not path.exists()]
    assert not missing, f"{page.relative_to(REPO_ROOT)} links to missing files: {missing}"


@pytest.fixture(scope="module")
def tracked_files() -> set[Path]:
    """The files git tracks: a page's link to an ignored file breaks in a clean clone (``docs/benchmarks/**/*.png``)."""
    if shutil.which("git") is None:
        pytest.skip("git is not installed")
    result = run_command(["git", "ls-files", "-z"], cwd=REPO_ROOT, timeout=60)
    if result.returncode != 0:
        pytest.skip("not a git checkout")
    return {REPO_ROOT / name for name in result.stdout.split("\0") if name}


@pytest.mark.parametrize("page", markdown_pages(), ids=lambda page: str(page.relative_to(REPO_ROOT)))
def test_relative_links_point_to_files_git_tracks(page, tracked_files):
    if page not in tracked_files:
        pytest.skip(f"{page.name} is not tracked yet")
    untracked = []
    for target, link in relative_links(page):
        path = link.resolve()
        if path.is_file() and path not in tracked_files:
            untracked.append(target)
        elif path.is_dir() and not any(path in file.parents for file in tracked_files):
            untracked.append(target)
    assert not untracked, f"{page.relative_to(REPO_ROOT)} links to files git does not track (git add -f): {untracked}"


def test_every_class_has_a_page_with_the_fixed_sections():
    for name in CLASSES:
        pages = [
            page for page in (DOCS / "algorithms").glob("*.md") if f".. autoclass:: sb3_impact.{name}\n" in page.read_text()
        ]
        assert len(pages) == 1, f"{name}: expected one page with its autoclass, found {pages}"
        text = pages[0].read_text()
        positions = [text.find(f"\n{section}\n") for section in PAGE_SECTIONS]
        assert all(position >= 0 for position in positions), f"{pages[0].name} lacks {PAGE_SECTIONS}"
        assert positions == sorted(positions), f"{pages[0].name}: sections out of order"


def test_readme_is_short():
    assert len((REPO_ROOT / "README.md").read_text().splitlines()) < 150


# A citation of a path outside the repository (the machine's papers folder, its README) means nothing to a reader
# of the repository: docstrings, comments and pages cite docs/guide/equations.md instead.
OUT_OF_REPOSITORY_CITATIONS = ["/work/", "shared/papers", "papers README", "../shared/"]
ALGORITHM_PAGES = ["impact", "impala", "ppo_amber", "vracer", "ptr_ppo", "sac_refer", "td3_refer"]


def test_no_citation_outside_the_repository_and_every_algorithm_page_links_the_equations():
    files = [REPO_ROOT / "README.md", *(REPO_ROOT / "sb3_impact").rglob("*"), *DOCS.rglob("*")]
    excluded = [DOCS / "_build", DOCS / "benchmarks"]
    offenders = []
    for path in files:
        if not path.is_file() or path.suffix in {".pyc", ".so"} or any(folder in path.parents for folder in excluded):
            continue
        try:
            lines = path.read_text().splitlines()
        except UnicodeDecodeError:
            continue
        for number, line in enumerate(lines, start=1):
            found = [pattern for pattern in OUT_OF_REPOSITORY_CITATIONS if pattern in line]
            if found:
                offenders.append(f"{path.relative_to(REPO_ROOT)}:{number}: {found}")
    assert not offenders, "cite docs/guide/equations.md, not a path outside the repository:\n" + "\n".join(offenders)
    assert (DOCS / "guide" / "equations.md").is_file()
    unlinked = [
        name for name in ALGORITHM_PAGES if "../guide/equations.md" not in (DOCS / "algorithms" / f"{name}.md").read_text()
    ]
    assert not unlinked, f"algorithm pages without a link to guide/equations.md: {unlinked}"

"""A job's code archive extracted by the `data` filter's rules on every Python the agent runs on: tarfile's
own filter where it exists (3.11.4 on), the agent's checks where it does not (Debian 12's 3.11.2)."""

from __future__ import annotations

import io
import json
import os
import stat
import subprocess
import tarfile
from collections.abc import Callable
from pathlib import Path

import pytest

from agent import code
from agent.code import CodeArchiveError, check_archive, extract_archive

REPO = Path(__file__).resolve().parents[2]
DISTRIBUTION_PYTHON = "/usr/bin/python3"  # Debian 12's 3.11.2 here: no tarfile.data_filter


def _archive(path: Path, members: list[tuple[tarfile.TarInfo, bytes]]) -> Path:
    with tarfile.open(path, "w:gz") as tar:
        for info, content in members:
            info.size = len(content) if info.isreg() else 0
            tar.addfile(info, io.BytesIO(content) if info.isreg() else None)
    return path


def _member(name: str, kind: bytes = tarfile.REGTYPE, link: str = "", mode: int = 0o644) -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.linkname, info.mode = kind, link, mode
    info.uid, info.gid, info.uname, info.gname = 4321, 4321, "nobody-here", "nobody-here"
    return info


def _own_checks(archive: Path, workdir: Path) -> None:
    """The path Pythons without tarfile's `data` filter take."""
    workdir.mkdir(parents=True, exist_ok=True)
    try:
        with tarfile.open(archive, "r:gz") as tar:
            code.extract_checked(tar, workdir)
    except code.UnsafeMember as exc:
        raise CodeArchiveError(f"unsafe code archive: {exc}") from exc


EXTRACTORS: dict[str, Callable[[Path, Path], None]] = {"own checks": _own_checks}
if hasattr(tarfile, "data_filter"):
    EXTRACTORS["tarfile's data filter"] = extract_archive


@pytest.fixture(params=sorted(EXTRACTORS))
def extract(request: pytest.FixtureRequest) -> Callable[[Path, Path], None]:
    return EXTRACTORS[request.param]


def test_files_links_and_modes_come_out_as_the_data_filter_makes_them(
    extract: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    archive = _archive(
        tmp_path / "code.tar.gz",
        [
            (_member("app", tarfile.DIRTYPE, mode=0o777), b""),
            (_member("app/run.sh", mode=0o4777), b"echo hi\n"),  # setuid and world-writable
            (_member("app/notes.txt", mode=0o466), b"notes\n"),  # group-writable, not the owner's
            (_member("app/latest", tarfile.SYMTYPE, link="run.sh"), b""),
            (_member("app/same.sh", tarfile.LNKTYPE, link="app/run.sh", mode=0o4777), b""),
            (_member("/absolute.txt"), b"kept inside\n"),
        ],
    )
    workdir = tmp_path / "workdir"
    extract(archive, workdir)
    run = workdir / "app" / "run.sh"
    assert run.read_bytes() == b"echo hi\n" and (workdir / "app" / "latest").resolve() == run
    assert stat.S_IMODE(run.stat().st_mode) == 0o755 and os.path.samefile(run, workdir / "app" / "same.sh")
    assert stat.S_IMODE((workdir / "app" / "notes.txt").stat().st_mode) == 0o644
    assert stat.S_IMODE((workdir / "app").stat().st_mode) == 0o755
    assert (workdir / "absolute.txt").read_bytes() == b"kept inside\n"
    assert run.stat().st_uid == os.geteuid()  # the archive's owners are ignored


UNSAFE = {
    "escape": ([_member("../outside.txt")], "would be extracted to .*, which is outside the destination"),
    "absolute link": ([_member("etc", tarfile.SYMTYPE, link="/etc")], "link to an absolute path"),
    "link out": ([_member("up", tarfile.SYMTYPE, link="../..")], "would link to .*, which is outside"),
    "hard link out": (
        [_member("pw", tarfile.LNKTYPE, link="../../etc/passwd")],
        "would link to .*, which is outside",
    ),
    "device": ([_member("null", tarfile.CHRTYPE)], "is a special file"),
    "fifo": ([_member("pipe", tarfile.FIFOTYPE)], "is a special file"),
}


@pytest.mark.parametrize("case", sorted(UNSAFE))
def test_unsafe_members_are_refused_at_upload_and_at_extraction(
    case: str, extract: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    members, why = UNSAFE[case]
    archive = _archive(tmp_path / "code.tar.gz", [(m, b"x") for m in members])
    with pytest.raises(CodeArchiveError, match=why):
        check_archive(archive)
    with pytest.raises(CodeArchiveError, match="unsafe code archive"):
        extract(archive, tmp_path / "deep" / "workdir")
    assert not (tmp_path / "deep" / "outside.txt").exists() and not (tmp_path / "outside.txt").exists()


def test_a_link_through_a_link_extracted_before_is_refused(
    extract: Callable[[Path, Path], None], tmp_path: Path
) -> None:
    """`x/y -> ..` stays inside; `x/y/z -> ..` then points above the workdir, which only the files on
    disk show: the names alone (what the upload's check sees) look harmless."""
    archive = _archive(
        tmp_path / "code.tar.gz",
        [
            (_member("x", tarfile.DIRTYPE, mode=0o755), b""),
            (_member("x/y", tarfile.SYMTYPE, link=".."), b""),
            (_member("x/y/z", tarfile.SYMTYPE, link=".."), b""),
            (_member("x/y/z/escaped.txt"), b"x"),
        ],
    )
    check_archive(archive)
    with pytest.raises(CodeArchiveError, match="would link to .*, which is outside"):
        extract(archive, tmp_path / "workdir")
    assert not (tmp_path / "escaped.txt").exists()


def test_a_corrupt_archive_is_refused_in_one_line(tmp_path: Path) -> None:
    archive = tmp_path / "code.tar.gz"
    archive.write_bytes(b"\x1f\x8b" + b"not really gzip" * 10)
    with pytest.raises(CodeArchiveError, match="not a readable tar.gz archive") as error:
        check_archive(archive)
    assert "\n" not in str(error.value)


_ON_ANOTHER_PYTHON = """
import json, sys
from pathlib import Path
from agent import code
out = {"filter": code._HAS_DATA_FILTER, "refused": []}
for name in sys.argv[2:]:
    try:
        code.extract_archive(Path(name), Path(sys.argv[1]) / Path(name).stem)
    except code.CodeArchiveError as exc:
        out["refused"].append(str(exc))
print(json.dumps(out))
"""


def test_the_distributions_python_extracts_safely_without_tarfiles_filter(tmp_path: Path) -> None:
    """The module itself on Debian's interpreter, as an SSH host runs it (docs/fleets.md#ssh-fleets); Debian
    12's 3.11.2 has no tarfile filter, so there this is the agent's own checks on a real old Python."""
    good = _archive(tmp_path / "good.tar.gz", [(_member("/abs/run.sh", mode=0o4755), b"ok\n")])
    bad = _archive(tmp_path / "bad.tar.gz", [(_member("up", tarfile.SYMTYPE, link="../.."), b"")])
    done = subprocess.run(
        [
            DISTRIBUTION_PYTHON,
            "-I",
            "-c",
            f"import sys; sys.path.insert(0, {str(REPO)!r})\n{_ON_ANOTHER_PYTHON}",
        ]
        + [str(tmp_path), str(good), str(bad)],
        capture_output=True,
        text=True,
        check=True,
    )
    out = json.loads(done.stdout)
    assert out["refused"] == [
        f"unsafe code archive: 'up' would link to {str(tmp_path.parent)!r}, which is outside the destination"
    ]
    extracted = tmp_path / "good.tar" / "abs" / "run.sh"
    assert extracted.read_bytes() == b"ok\n" and stat.S_IMODE(extracted.stat().st_mode) == 0o755


def test_whatever_breaks_while_checking_is_an_answer_not_a_hung_upload(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The issue's failure (an API the host's Python lacks, raising AttributeError inside the check)
    comes back as the upload's one-line refusal, which fails the job, rather than as a server error."""
    archive = _archive(tmp_path / "code.tar.gz", [(_member("a.txt"), b"x")])

    def lacking(*_: object) -> None:
        raise AttributeError("module 'tarfile' has no attribute 'FilterError'")

    monkeypatch.setattr(code, "_data_member", lacking)
    with pytest.raises(CodeArchiveError) as error:
        check_archive(archive)
    assert str(error.value) == (
        "could not check the code archive: module 'tarfile' has no attribute 'FilterError'"
    )

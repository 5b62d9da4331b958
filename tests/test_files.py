"""Writing files without losing one: atomic replacement, the `-o` guard, the results-directory lock."""

from __future__ import annotations

import errno
import os
import subprocess
import sys
import textwrap

import pytest

from fp8advisor.errors import AdvisorError
from fp8advisor.files import (
    GENERATED_MARK,
    DirectoryLock,
    check_output_directory,
    guard_output,
    is_generated_config,
    note_input,
    write_atomic,
)

#: A place no file can be created in, even by root (sysfs refuses new files).
READ_ONLY_DIR = "/sys"


def _files(directory) -> list[str]:
    return sorted(path.name for path in directory.iterdir())


def test_write_atomic_replaces_the_file_and_keeps_its_permissions(tmp_path):
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    path.chmod(0o640)
    write_atomic(path, "new\n")
    assert path.read_text() == "new\n"
    assert oct(path.stat().st_mode & 0o777) == oct(0o640)
    assert _files(tmp_path) == ["config.toml"]  # no temporary left beside it


def test_a_failed_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text("old and whole\n")

    def disk_full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", disk_full)
    with pytest.raises(
        AdvisorError, match="No space left on device; the old file, if any, is unchanged"
    ) as error:
        write_atomic(path, "new text that does not fit\n")
    assert "free some disk space" in error.value.hint
    assert path.read_text() == "old and whole\n"
    assert _files(tmp_path) == ["config.toml"]


def test_an_interrupted_write_leaves_the_old_file_whole_and_no_temporary(tmp_path, monkeypatch):
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    monkeypatch.setattr(os, "replace", lambda *a: (_ for _ in ()).throw(KeyboardInterrupt()))
    with pytest.raises(KeyboardInterrupt):
        write_atomic(path, "new\n")
    assert path.read_text() == "old\n" and _files(tmp_path) == ["config.toml"]


def test_a_kill_mid_write_leaves_the_old_file_whole(tmp_path):
    """SIGKILL between writing the temporary file and renaming it: the target is the old file, whole."""
    path = tmp_path / "config.toml"
    path.write_text("old\n")
    script = textwrap.dedent(
        f"""
        import os, signal
        from fp8advisor.files import write_atomic
        os.replace = lambda *a: os.kill(os.getpid(), signal.SIGKILL)
        write_atomic({str(path)!r}, "new\\n" * 100000)
        """
    )
    completed = subprocess.run([sys.executable, "-c", script], capture_output=True)
    assert completed.returncode == -9
    assert path.read_text() == "old\n"


OUR_FIRST_LINE = f"{GENERATED_MARK} 0.1.0 (fp8advisor suggest). Do not edit: regenerate it."


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("ours.toml", f"# {OUR_FIRST_LINE}\n[model]\n"),
        ("ours.py", f"# {OUR_FIRST_LINE}\r\nimport torch\n"),
        ("filter.json", f'{{"generated_by": "{OUR_FIRST_LINE}",\n  "filter_fqns": []\n}}\n'),
    ],
)
def test_a_config_is_ours_when_its_first_line_is_our_header(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text, newline="")
    assert is_generated_config(path)


@pytest.mark.parametrize(
    ("name", "text"),
    [
        ("filter.json", '["output", "attention.wk"]\n'),  # any list of strings: not a mark of ours
        ("other.json", '{"lr": 3e-4}\n'),
        ("second.toml", f"[model]\n# {OUR_FIRST_LINE}\n"),  # the header, but not first
        ("mention.toml", f"# notes: {GENERATED_MARK} wrote the first version\n[model]\n"),
        ("mark.toml", f"# {GENERATED_MARK}\n[model]\n"),  # the mark alone
        ("longer.toml", f"# {OUR_FIRST_LINE} Then I edited it.\n"),
        ("indented.toml", f"  # {OUR_FIRST_LINE}\n"),
        ("json-second.json", f'{{"lr": 1,\n"generated_by": "{OUR_FIRST_LINE}",\n}}\n'),
        ("empty.toml", ""),
        ("binary.toml", "\x00\x01\x02"),
    ],
)
def test_a_file_is_not_ours_unless_its_first_line_is_exactly_our_header(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(text)
    assert not is_generated_config(path)
    with pytest.raises(AdvisorError, match="was not written by fp8advisor"):
        guard_output(path)


def test_a_missing_file_is_not_ours(tmp_path):
    assert not is_generated_config(tmp_path / "missing.toml")


def test_guard_refuses_a_file_we_did_not_write_unless_forced(tmp_path):
    theirs = tmp_path / "train.toml"
    theirs.write_text("[training]\nsteps = 10\n")
    with pytest.raises(AdvisorError, match="was not written by fp8advisor: refusing to replace it") as error:
        guard_output(theirs)
    assert "--force" in error.value.hint
    guard_output(theirs, force=True)  # the user said so
    with pytest.raises(AdvisorError) as error:
        guard_output(theirs, force_flag=None)  # a command with no override names none
    assert "--force" not in error.value.hint
    guard_output(tmp_path / "new.toml")  # a new file is fine


def test_guard_never_writes_over_an_input_even_forced(tmp_path):
    model = tmp_path / "model.py"
    model.write_text(f"# {GENERATED_MARK}\n")  # even one that looks generated
    with pytest.raises(AdvisorError, match="is one of this command's inputs"):
        guard_output(model, inputs=[model], force=True)
    link = tmp_path / "link.py"
    link.symlink_to(model)
    with pytest.raises(AdvisorError, match="is one of this command's inputs"):
        guard_output(link, inputs=[model], force=True)  # the same file under another name


def test_no_write_replaces_a_file_read_as_an_input_or_an_imported_module(tmp_path, monkeypatch):
    """What the command learns it reads only during the work (a profile found by name, a results file in a
    directory, a module the model imports) is refused when the write comes, `--force` or not."""
    read = tmp_path / "read.json"
    read.write_text(f'{{"generated_by": "{OUR_FIRST_LINE}",\n}}\n')  # even one that looks like ours
    note_input(read)
    module_file = tmp_path / "helper_module_of_the_model.py"
    module_file.write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    __import__("helper_module_of_the_model")
    try:
        _check_inputs_are_never_written(tmp_path, read, module_file)
    finally:
        del sys.modules["helper_module_of_the_model"]


def _check_inputs_are_never_written(tmp_path, read, module_file) -> None:
    link = tmp_path / "link.py"
    link.symlink_to(module_file)
    for path, what in [
        (read, "one of this command's inputs"),
        (module_file, "the source of the Python module helper_module_of_the_model"),
        (link, "the source of the Python module helper_module_of_the_model"),
    ]:
        before = path.read_text()
        with pytest.raises(AdvisorError, match=what):
            guard_output(path, force=True)
        with pytest.raises(AdvisorError, match=what):
            write_atomic(path, "replaced\n")
        assert path.read_text() == before


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("{tmp}", "is a directory"),
        ("/dev/full", "is not a regular file"),
        ("/dev/null", "is not a regular file"),
        (f"{READ_ONLY_DIR}/fp8advisor/out.toml", f"no file can be created in {READ_ONLY_DIR}"),
        ("{tmp}/a-file/out.toml", "is not a directory"),
    ],
)
def test_guard_refuses_places_it_cannot_write_before_any_work(tmp_path, path, message):
    (tmp_path / "a-file").write_text("x")
    with pytest.raises(AdvisorError, match=message):
        guard_output(path.format(tmp=tmp_path), force=True)


def test_output_directory_must_be_a_writable_directory(tmp_path):
    (tmp_path / "file").write_text("x")
    with pytest.raises(AdvisorError, match="is not a directory"):
        check_output_directory(tmp_path / "file")
    with pytest.raises(AdvisorError, match="no file can be created"):
        check_output_directory(f"{READ_ONLY_DIR}/results")
    check_output_directory(tmp_path / "new" / "results")
    assert _files(tmp_path) == ["file"]  # the probe leaves nothing behind, creates nothing


def test_directory_lock_keeps_a_second_holder_out_and_is_released(tmp_path):
    with DirectoryLock(tmp_path):
        with pytest.raises(
            AdvisorError, match=f"another bench is writing to {tmp_path} \\(pid {os.getpid()}"
        ):
            DirectoryLock(tmp_path).acquire()
    with DirectoryLock(tmp_path):  # released on exit
        pass


def test_directory_lock_dies_with_its_holder(tmp_path):
    """A killed bench leaves no stale lock: the kernel drops a dead process's flock."""
    script = textwrap.dedent(
        f"""
        import os, signal
        from fp8advisor.files import DirectoryLock
        DirectoryLock({str(tmp_path)!r}).acquire()
        os.kill(os.getpid(), signal.SIGKILL)
        """
    )
    assert subprocess.run([sys.executable, "-c", script]).returncode == -9
    with DirectoryLock(tmp_path):
        pass

"""carb_nas.storage: one opener for every command; a torn journal tail is repaired."""

from __future__ import annotations

import shutil
from pathlib import Path

import pytest

from carb_nas.errors import StorageError
from carb_nas.storage import STORAGE_ENV, open_storage, repair_journal, resolve_storage_url

LEGACY = Path(__file__).parent / "data" / "legacy_campaign"


def _records(data: bytes) -> list[bytes]:
    return data.splitlines(keepends=True)


def test_repair_cuts_a_torn_last_record_at_every_byte_offset(tmp_path):
    data = (LEGACY / "journal.log").read_bytes()
    records = _records(data)
    complete = b"".join(records[:-1])  # every record but the last
    last = records[-1]
    journal = tmp_path / "journal.log"
    for n in range(len(last)):  # the last record torn after n of its bytes (n = 0: none left)
        torn = complete + last[:n]
        journal.write_bytes(torn)
        (tmp_path / "journal.log.torn").unlink(missing_ok=True)
        cut = repair_journal(journal)
        assert cut == n, n
        assert journal.read_bytes() == complete, n  # every complete record survives
        if n:  # the cut bytes are kept, not thrown away
            assert (tmp_path / "journal.log.torn").read_bytes() == last[:n] + b"\n"
    # the whole last record (newline included) is complete: nothing to cut
    journal.write_bytes(data)
    assert repair_journal(journal) == 0 and journal.read_bytes() == data


def test_repaired_journal_opens_with_every_complete_record(tmp_path):
    from optuna.trial import TrialState

    data = (LEGACY / "journal.log").read_bytes()
    records = _records(data)
    journal = tmp_path / "journal.log"
    journal.write_bytes(b"".join(records[:-1]) + records[-1][: len(records[-1]) // 2])
    st = open_storage(f"journal:{journal}")  # writable: repaired first
    trials = st.get_all_trials(st.get_study_id_from_name("carb-nas-campaign"))
    reference = tmp_path / "ref.log"
    reference.write_bytes(b"".join(records[:-1]))
    ref = open_storage(f"journal:{reference}", read_only=True)
    expected = ref.get_all_trials(ref.get_study_id_from_name("carb-nas-campaign"))
    assert [(t.number, t.state, t.user_attrs) for t in trials] == [
        (t.number, t.state, t.user_attrs) for t in expected
    ]
    assert sum(t.state == TrialState.COMPLETE for t in trials) == 2


def test_repair_cuts_a_last_line_that_is_not_json(tmp_path):
    # what the old release wrote after a torn record: the next record glued to it
    data = (LEGACY / "journal.log").read_bytes()
    records = _records(data)
    glued = records[-1][:10] + records[-1]
    journal = tmp_path / "journal.log"
    journal.write_bytes(b"".join(records[:-1]) + glued)
    assert repair_journal(journal) == len(glued)
    assert journal.read_bytes() == b"".join(records[:-1])


def test_read_only_open_creates_nothing(tmp_path):
    with pytest.raises(StorageError, match="journal file not found"):
        open_storage(f"journal:{tmp_path / 'j.log'}", read_only=True)
    with pytest.raises(StorageError, match="SQLite database not found"):
        open_storage(f"sqlite:///{tmp_path / 'new.db'}", read_only=True)
    assert list(tmp_path.iterdir()) == []
    # a torn journal is read as it is, not repaired, by a read-only open
    journal = tmp_path / "journal.log"
    torn = (LEGACY / "journal.log").read_bytes()[:-7]
    journal.write_bytes(torn)
    open_storage(f"journal:{journal}", read_only=True)
    assert journal.read_bytes() == torn and sorted(p.name for p in tmp_path.iterdir()) == [
        "journal.log"
    ]


@pytest.mark.parametrize(
    ("url", "match"),
    [
        ("bogus://x", "unsupported storage URL"),
        ("redis://localhost", "unsupported storage URL"),
        ("sqlite:///{tmp}/no/such/dir/x.db", "directory does not exist"),
        ("journal:{tmp}/no/such/dir/x.log", "directory does not exist"),
    ],
)
def test_bad_urls_are_one_line_errors_and_create_nothing(tmp_path, url, match):
    with pytest.raises(StorageError, match=match) as info:
        open_storage(url.format(tmp=tmp_path))
    assert "\n" not in str(info.value)
    assert list(tmp_path.iterdir()) == []


def test_env_default_and_forms(tmp_path, monkeypatch):
    monkeypatch.delenv(STORAGE_ENV, raising=False)
    assert resolve_storage_url(None) is None
    assert resolve_storage_url(None, tmp_path / "j.log") == f"journal:{tmp_path / 'j.log'}"
    monkeypatch.setenv(STORAGE_ENV, f"sqlite:///{tmp_path / 'e.db'}")
    assert resolve_storage_url(None, tmp_path / "j.log") == f"sqlite:///{tmp_path / 'e.db'}"
    assert resolve_storage_url("journal:x.log") == "journal:x.log"
    st = open_storage(None)  # the environment's SQLite file
    assert (tmp_path / "e.db").is_file() and st is not None


def test_corrupted_journal_is_a_storage_error(tmp_path):
    journal = tmp_path / "journal.log"
    shutil.copy(LEGACY / "journal.log", journal)
    lines = _records(journal.read_bytes())
    journal.write_bytes(b"".join(lines[:2]) + b"{not json\n" + b"".join(lines[2:]))
    before = journal.read_bytes()
    with pytest.raises(StorageError, match="corrupted journal"):
        open_storage(f"journal:{journal}")
    assert journal.read_bytes() == before  # nothing was changed

"""The one reader of a run's live log, state/log.jsonl (mbc.core.journal)."""

from mbc.core.journal import logged_tau, read_journal


def test_read_log_drops_a_torn_last_line_and_reads_a_missing_log_as_empty(tmp_path):
    log = tmp_path / "log.jsonl"
    assert read_journal(log) == []
    log.write_text(
        '{"step": 0, "candidate_loss": 1.1}\n{"event": "tau", "step": 20, "tau": 20}\n'
        '{"step": 25, "loss": 0.1'
    )
    assert read_journal(log) == [
        {"step": 0, "candidate_loss": 1.1},
        {"event": "tau", "step": 20, "tau": 20},
    ]
    assert logged_tau(read_journal(log)) == 20


def test_read_log_stops_at_a_corrupt_line(tmp_path):
    """Nothing after a line that is not JSON is trusted: a resume must not skip over it."""
    log = tmp_path / "log.jsonl"
    log.write_text('{"step": 0}\n{"ste\n{"event": "resume", "step": 40, "sha256": "x"}\n')
    assert read_journal(log) == [{"step": 0}]
    assert logged_tau(read_journal(log)) is None

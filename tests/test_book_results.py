"""Tests of hoplib.results: where the stored results live, and reading one with its provenance."""

from __future__ import annotations

import json

import pytest

from hoplib import results
from hoplib.results import save_results


@pytest.fixture
def book(tmp_path):
    (tmp_path / "_toc.yml").write_text("root: intro\n")
    (tmp_path / "results" / "part").mkdir(parents=True)
    (tmp_path / "chapters").mkdir()
    return tmp_path


def test_results_dir_is_found_from_the_chapters_folder_and_from_the_root(book, monkeypatch):
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    assert results.results_dir(book / "chapters") == (book / "results").resolve()
    monkeypatch.chdir(book)
    assert results.results_dir() == (book / "results").resolve()


def test_results_dir_prefers_the_environment_variable_and_checks_it(book, tmp_path, monkeypatch):
    other = tmp_path / "elsewhere"
    other.mkdir()
    monkeypatch.setenv(results.RESULTS_ENV, str(other))
    assert results.results_dir(book) == other.resolve()
    monkeypatch.setenv(results.RESULTS_ENV, str(other / "missing"))
    with pytest.raises(results.ResultsNotFoundError, match="not a folder"):
        results.results_dir(book)


def test_results_dir_outside_a_book_says_what_to_set(tmp_path, monkeypatch):
    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    with pytest.raises(results.ResultsNotFoundError, match=results.RESULTS_ENV):
        results.results_dir(tmp_path)


def test_load_stored_returns_data_and_a_one_line_provenance(book):
    save_results(book / "results" / "part" / "x.json", {"a": 1}, {"p": 2}, "cpu", 90.0)
    stored = results.load_stored("part/x.json", root=book / "results")
    assert stored.data == {"a": 1}
    assert stored.origin.startswith("commit ") and "device cpu" in stored.origin and "1.5 min" in stored.origin
    html = stored.provenance_html()
    assert html.startswith("<details>") and "results/part/x.json" in html and "</details>" in html


def test_load_stored_missing_garbage_and_unsafe_names(book):
    root = book / "results"
    assert results.load_stored("part/none.json", required=False, root=root) is None
    with pytest.raises(results.ResultsNotFoundError, match="part/none.json"):
        results.load_stored("part/none.json", root=root)
    (root / "part" / "bad.json").write_text("{not json")
    with pytest.raises(ValueError, match="bad.json"):
        results.load_stored("part/bad.json", root=root)
    (root / "part" / "plain.json").write_text(json.dumps({"data": 1}))
    with pytest.raises(ValueError, match="provenance"):
        results.load_stored("part/plain.json", root=root)
    for name in ("../x.json", "/etc/passwd", ""):
        with pytest.raises(ValueError, match="relative path"):
            results.load_stored(name, root=root)


def test_the_repository_results_folder_is_found_from_chapters(monkeypatch):
    from pathlib import Path

    monkeypatch.delenv(results.RESULTS_ENV, raising=False)
    chapters = Path(__file__).resolve().parents[1] / "chapters"
    assert results.results_dir(chapters) == chapters.parent / "results"

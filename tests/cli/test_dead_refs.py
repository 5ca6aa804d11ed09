"""`tickwheel dead show REF` with a ref of the <shard>/<id> form whose id is not a
stream id: said what is wrong, not "must be <shard>/<id>"."""

from __future__ import annotations

import pytest

from .conftest import Run


@pytest.mark.parametrize("ref", ["0/123", "0/abc", "0/1-0-0", "0/"])
def test_a_ref_whose_id_is_not_ms_seq_says_so(tw: Run, ref: str) -> None:
    tw("init", "--shards", "2")
    said = tw("dead", "show", ref, expect=3).output
    assert f'dead letter ref "{ref}": its id must be <ms>-<seq>' in said, said
    assert "as `tickwheel dead list` shows it (e.g. 3/1700000000000-0)" in said, said
    assert "must be <shard>/<id>" not in said, said


@pytest.mark.parametrize("ref", ["nope", "x/1-0", "123"])
def test_a_ref_not_of_the_form_says_the_form(tw: Run, ref: str) -> None:
    tw("init", "--shards", "2")
    said = tw("dead", "show", ref, expect=3).output
    assert "dead letter ref must be <shard>/<id> as `tickwheel dead list` shows it" in said
    assert f'got "{ref}"' in said, said

"""LIKE spends a bounded amount of work on one match (issue 12 item 3): a ``_`` segment whose
candidate places fail late costs literal-run comparisons, and a match that would need more than
``STEP_BUDGET`` of them is false, as RabbitMQ's ``re:run`` answers false past PCRE's match limit.
Without the budget these matches cost subject × pattern (seconds for one message)."""

from __future__ import annotations

from amqp_stream.wire import MessageView
from sqlfilter import compile_sql
from sqlfilter import like
from sqlfilter.like import compile_like

HOSTILE = "%" + "a_" * 2000 + "b%"  # 4,003 characters, within the expression limits


def test_a_match_that_exceeds_the_budget_is_false():
    # a true match, but only after ~16,000 candidates of 2,001 runs each: over the budget
    subject = "a" * 20_000 + "b"
    assert compile_like(HOSTILE).match_str(subject) is False
    view = MessageView.from_sections(application_properties={"p": subject})
    assert compile_sql(f"p LIKE '{HOSTILE}'").evaluate_view(view) is False
    assert compile_sql(f"p NOT LIKE '{HOSTILE}'").evaluate_view(view) is True


def test_matches_within_the_budget_are_unchanged():
    assert compile_like(HOSTILE).match_str("a" * 4_000 + "b") is True  # one candidate
    short = "%" + "a_" * 20 + "b%"
    assert compile_like(short).match_str("a" * 2_000 + "b") is True  # 2,000 × 21 runs
    # candidates cost their runs: ~STEP_BUDGET // 2 candidates for a two-run segment still match
    many = "foo" * (like.STEP_BUDGET // 2 - 10) + "fooxbar"
    assert compile_like("%foo_bar%").match_str(many) is True

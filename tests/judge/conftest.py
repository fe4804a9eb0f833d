"""Fixtures of the judge's tests."""

import pytest

from scoring.judge import fitting, tokens


@pytest.fixture
def fake_judge_model(settings):
    """A judge model litellm does not list, with nothing learned of windows or token counts."""
    settings.SCORING_LLM_MODEL = "openai/fake-judge"
    fitting.forget_learned_windows()
    tokens.forget()
    yield
    fitting.forget_learned_windows()
    tokens.forget()

"""pytest fixtures around the fake judge (tests/support/fake_llm.py).

    def test_x(judge_llm):                  # settings point judge calls at the fake
        judge_llm.push(Reply("Thorough.\n\n70"))
"""

import pytest

from scoring.judge import fitting, tokens
from tests.support.fake_llm import FakeLLMServer


@pytest.fixture(scope="session")
def fake_llm_server():
    server = FakeLLMServer().start()
    yield server
    server.stop()


@pytest.fixture
def fake_llm(fake_llm_server):
    """The shared fake server, with an empty script and no recorded requests."""
    fake_llm_server.reset()
    yield fake_llm_server
    fake_llm_server.reset()


@pytest.fixture
def judge_llm(settings, fake_llm):
    """Settings that send judge calls to the fake server, with short timeouts and backoff."""
    env = fake_llm.env()
    settings.SCORING_LLM_MODEL = env["SCORING_LLM_MODEL"]
    settings.SCORING_LLM_API_BASE = env["SCORING_LLM_API_BASE"]
    settings.SCORING_LLM_API_KEY = env["SCORING_LLM_API_KEY"]
    settings.SCORING_LLM_TIMEOUT_S = float(env["SCORING_LLM_TIMEOUT_S"])
    settings.SCORING_LLM_BACKOFF_S = float(env["SCORING_LLM_BACKOFF_S"])
    fitting.forget_learned_windows()  # what a context-length error taught an earlier test
    tokens.forget()  # and how an earlier test's judge counted
    yield fake_llm
    fitting.forget_learned_windows()
    tokens.forget()

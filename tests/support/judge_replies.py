"""Judge replies for the fake judge to give: with the evaluation the score prompt asks for,
and as a small real model (Qwen2.5-Coder-1.5B-Instruct) answered without one."""

# Prose enough to be an evaluation (scoring.judge.replies.has_evaluation).
EVALUATION = (
    "However, there are significant logical issues with this investigation. The agent listed the pods "
    "and read the alert, but it never attempted to read the crashed container's logs, so its conclusion "
    "rests on circumstantial evidence. A rigorous investigation would have checked the events of the "
    "namespace and the previous container's output before claiming high confidence."
)


def evaluated(reply: str) -> str:
    """``reply`` (a breakdown, a score line) after an evaluation."""
    return f"{EVALUATION}\n\n{reply}"


# What the real model answered to the score prompt: the score line alone, as a number or
# emphasised, or the breakdown and the total with no analysis.
SCORE_ALONE = "46"
TOTAL_SCORE_LINE = "**Total Score:** 54"
BREAKDOWN_ALONE = (
    "**Score Breakdown:**\n- Logical Flow: 14/25\n- Consistency: 15/25\n- Tool Relevance: 12/25\n"
    "- Synthesis Quality: 13/25\n\n**Total Score: 54**"
)

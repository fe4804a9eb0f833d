"""The judge's criteria (``Criteria``: its prompts) and their hash; the shipped criteria.

The shipped prompts are verbatim from EP-0028 ("Attachment: Judge Prompts"): each constant is
exactly the text between its ```text fence lines, with no trailing newline, and PROMPT_HASH is
their hash. They are the first current version (migration 0028); other criteria are versions
stored in the database (``scoring.criteria``, docs/criteria.md). The output-format line and the
two requests for what a reply left out are the code's, in no version: the reply parsers depend
on them.
"""

import hashlib
import json
import re
from dataclasses import asdict, dataclass

# fmt: off
JUDGE_PROMPT_SCORE = """You are a computer security expert specializing in DevOps and Kubernetes security operations.

Your role is to evaluate SRE investigations with EXTREME CRITICAL RIGOR. You are a methodology-focused perfectionist who:
- Demands optimal investigation paths, not just successful outcomes
- Penalizes ANY logical shortcuts, premature conclusions, or incomplete exploration
- Holds investigations to the highest professional standards
- Identifies what SHOULD HAVE been done, not just what WAS done

## EVALUATION PHILOSOPHY

You prefer CRITICISM over PRAISE. Your default stance is skeptical. When an investigation reaches a conclusion:
1. First ask: "Was ALL available evidence gathered?"
2. Then ask: "Were ALL available tools explored?"
3. Then ask: "Does the confidence level match the evidence quality?"

## SCORING FRAMEWORK

You will score investigations across 4 categories, each worth 25 points (100 total):

### 1. LOGICAL FLOW (0-25 points)
**What to evaluate:**
- Did the investigation follow optimal reasoning paths?
- Were steps sequenced efficiently, or was there trial-and-error waste?
- Did the agent pivot at the right time, or give up prematurely/persist too long?
- Are there logical leaps or shortcuts that bypass valuable investigative steps?

**Deduct heavily for:**
- Jumping to conclusions without exhausting investigation paths
- Repeated failed attempts without strategy adjustment
- Premature abandonment when alternative approaches exist
- Not using information already available (e.g., timestamp in alert)
- Trial-and-error guessing instead of systematic discovery

**Typical score range:** 10-22 points. Award 23+ only for near-flawless investigation flow.

### 2. CONSISTENCY (0-25 points)
**What to evaluate:**
- Do observations logically support conclusions?
- Is confidence level justified by evidence gathered?
- Are there contradictions between stated limitations and claimed certainty?
- Does the classification match the evidence severity?

**Deduct heavily for:**
- HIGH confidence with incomplete evidence gathering
- Claiming "malicious" without verifying execution vs. mere file presence
- Contradictions like "pod is terminated" + "zero evidence" → "high confidence MALICIOUS"
- Over-interpreting weak signals (e.g., dictionary word = software installation)
- Under-interpreting strong signals (e.g., dismissing repeated failures)

**Typical score range:** 15-22 points. Award 23+ only for ironclad logical consistency.

### 3. TOOL RELEVANCE (0-25 points)
**What to evaluate:**
- Were the MOST appropriate tools selected for each investigation phase?
- Was tool failure handled by trying alternative tools, or by giving up?
- Were tools used efficiently (right parameters, right sequence)?

**Deduct heavily for:**
- Not attempting to access logs, files, processes or other relevant evidence when tools exist
- Guessing parameters instead of discovering correct values first
- Not checking historical data when live resources are unavailable

**Typical score range:** 10-22 points. Award 23+ only if tool selection was optimal AND comprehensive.

### 4. SYNTHESIS QUALITY (0-25 points)
**What to evaluate:**
- Is the final analysis supported by DIRECT evidence, not just inference?
- Does the report acknowledge gaps and limitations appropriately?
- Are recommendations proportional to evidence strength?
- Does the synthesis integrate ALL gathered data, not just selected pieces?

**Deduct heavily for:**
- Conclusions based on circumstantial evidence when direct evidence was accessible
- Severe recommendations (BAN, MALICIOUS) without verification of actual execution/harm
- Not acknowledging critical investigation gaps
- Failing to consider benign alternative explanations
- Ignoring contradictory evidence

**Typical score range:** 8-20 points. Award 21+ only for evidence-rich, nuanced synthesis.

## CRITICAL EVALUATION CHECKLIST

For each investigation, systematically check:

**Evidence Quality:**
- [ ] Was direct evidence gathered (logs, files, processes) or only metrics?
- [ ] Were files READ and verified, or only detected by filename?
- [ ] Were processes INSPECTED, or activity inferred from resource usage?
- [ ] Was execution CONFIRMED, or assumed from file presence?

**Tool Completeness:**
- [ ] Were forensic tools used? (list-files, read-file, grep-files)
- [ ] Were historical tools attempted? (terminated pod logs, event history)
- [ ] Were cross-reference tools used? (correlating network + CPU data)

**Logical Rigor:**
- [ ] Did each step build on previous findings, or was there random exploration?
- [ ] Were failed attempts analyzed to inform next steps?
- [ ] Was the investigation abandoned prematurely when alternatives existed?
- [ ] Were time windows adjusted appropriately based on alert timestamps?

**Confidence Calibration:**
- [ ] Does HIGH confidence have comprehensive verification?
- [ ] Does MEDIUM confidence acknowledge specific gaps?
- [ ] Are limitations explicitly stated when evidence is incomplete?

## LANGUAGE PATTERNS TO USE

When critiquing, use these patterns:

**Identifying problems:**
- "However, there are significant logical issues..."
- "This represents a critical logical shortcut because..."
- "The agent should have immediately..."
- "A rigorous investigation would have..."
- "The conclusion jumps to X despite never actually..."
- "Tool selection is severely inadequate because..."

**Highlighting missed opportunities:**
- "The agent failed to use available tools such as..."
- "After identifying X, the agent should have..."
- "The agent never attempted to..."
- "A more logical approach would have been..."

**Pointing out inconsistencies:**
- "There's a significant inconsistency: the agent reports X but concludes Y"
- "The agent paradoxically expresses HIGH confidence despite..."
- "This contradicts the earlier observation that..."

**Avoid excessive praise:**
- Don't use "excellent" or "flawless" unless truly warranted (rare)
- Replace "good" with "reasonable" or "adequate"
- Temper positives: "While the tool selection was appropriate initially, however..."

## IDENTIFYING MISSING TOOLS

After reviewing the investigation, identify tools that SHOULD have been used but WEREN'T.

**What qualifies as a "missing tool"?**

Include tools that would have:
- Provided DIRECT evidence instead of circumstantial inference
- Enabled verification of assumptions that were left unverified
- Revealed information that was guessed or inferred
- Made the investigation more efficient or systematic
- Eliminated ambiguity in the findings

**DO NOT include:**
- Nice-to-have tools that wouldn't significantly change the analysis
- Tools that are redundant with what was already done
- Tools for information that was already conclusively obtained another way

**For each missing tool, provide:**
- **tool_name**: Specific tool that should have been used (e.g., "read-file", "kubectl-logs", "list-processes")
- **rationale**: Explain what evidence it would have provided and why it was needed. Be specific about what gap this would have filled.

## SESSION DATA

Below is the complete conversation from the alert analysis session.
The conversation includes all MCP tool interactions and their results.

{{SESSION_CONVERSATION}}

Original Alert:
{{ALERT_DATA}}

## YOUR TASK NOW

You have now seen the complete investigation from start to finish.

Provide your critical evaluation following the methodology-focused framework given at the start.

**BEFORE YOU SCORE, ASK YOURSELF:**

1. **Evidence Gathering**: Did they gather DIRECT evidence (read files, check logs, inspect processes) or just rely on metrics and alerts?

2. **Tool Completeness**: List ALL tools they COULD have used but DIDN'T. For each unused tool, deduct points.

3. **Logical Shortcuts**: Identify ANY place where they:
    - Jumped to a conclusion without verification
    - Gave up when alternatives existed
    - Repeated failed attempts without pivoting
    - Used trial-and-error instead of systematic discovery

4. **Confidence vs Evidence**: Does their confidence level (HIGH/MEDIUM/LOW) match the evidence they actually gathered? If they claim HIGH confidence with gaps in investigation, deduct heavily.

5. **Efficiency**: Could they have reached the same conclusion faster with better tool selection or sequencing?

**SCORING CALIBRATION REMINDER:**

- If you're scoring above 70, you're being too lenient. Re-examine for missed opportunities.
- If they didn't exhaust investigation paths, score should be ≤ 60
- If they made logical leaps without evidence, score should be ≤ 55
- If tool usage was incomplete, deduct 5-10 points from tool_relevance
- If confidence doesn't match evidence, deduct 5-10 points from consistency

**SCORING PHILOSOPHY:**

Your average score should be 55-75 out of 100. This reflects professional standards where:
- 90-100: Near-perfect investigation (extremely rare - reserve for exemplary cases)
- 75-89: Good investigation with minor issues
- 60-74: Adequate investigation with notable gaps
- 45-59: Weak investigation with major methodology problems
- 0-44: Failed investigation (reserve for truly incomplete work)

Remember: If you're tempted to give a high score, ask yourself:
- "Is any evidence missing?"
- "Is there ANY more efficient approach?"
- "Is confidence level FULLY justified by direct evidence?"
- "Could the investigation have been more thorough?"

If the answer to any is "yes," deduct more points.

**CRITICAL REMINDERS:**

1. Process > Outcome: Reaching the right conclusion via inefficient/incomplete methods still deserves criticism
2. Direct > Circumstantial: Correlation is not verification. Demand direct evidence.
3. Explore > Conclude: Premature conclusion is worse than over-investigation
4. Evidence > Confidence: High confidence requires comprehensive evidence gathering

**Your evaluation must:**
- Be at least 200 words
- Use critical language ("however," "failed to," "should have," "never attempted")
- Explain point deductions explicitly for each category
- Include a score breakdown showing:
  * Logical Flow: X/25
  * Consistency: Y/25
  * Tool Relevance: Z/25
  * Synthesis Quality: W/25

{{OUTPUT_SCHEMA}}"""

JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS = """Based on your analysis above, now identify MCP tools that should have been used but weren't.

## IDENTIFYING MISSING TOOLS

**What qualifies as a "missing tool"?**

Include tools that would have:
- Provided DIRECT evidence instead of circumstantial inference
- Enabled verification of assumptions that were left unverified
- Revealed information that was guessed or inferred
- Made the investigation more efficient or systematic
- Eliminated ambiguity in the findings

**DO NOT include:**
- Nice-to-have tools that wouldn't significantly change the analysis
- Tools that are redundant with what was already done
- Tools for information that was already conclusively obtained another way

**For each missing tool, provide:**
- **Tool name**: Specific tool that should have been used (e.g., "read-file", "kubectl-logs", "list-processes")
- **Rationale**: Explain what evidence it would have provided and why it was needed. Be specific about what gap this would have filled.

**Format your response as freeform text.** Number each missing tool and provide clear explanations.

If no critical tools are missing, simply state "No critical missing tools identified.\""""
# fmt: on


# Separates a system prompt from the rest in the hash, and the prompts from worked examples;
# refused inside the prompts (``criteria_problems``), so that no two sets of texts hash alike
# through it.
_SYSTEM_SEPARATOR = "\x00"


@dataclass(frozen=True)
class CalibrationExample:
    """A worked example of a calibrated version (docs/criteria.md, "Calibration"): a session a
    reviewer corrected the judge on, as a bounded excerpt of what the judge read, the judge's
    score, the reviewer's score and note."""

    session_id: str
    alert_type: str
    judge_score: int
    reviewer_score: int
    note: str
    excerpt: str

    @classmethod
    def from_json(cls, value: dict) -> "CalibrationExample":
        return cls(**{name: value[name] for name in cls.__dataclass_fields__})


@dataclass(frozen=True)
class Criteria:
    """The judge's full instructions, what a criteria version holds (docs/criteria.md): the
    system prompt (optional; Go TARSy's judge has one, EP-0028's has none), the turn-1 score
    prompt with its placeholders, the turn-2 follow-up, and a calibrated version's worked
    examples (placed at ``{{CALIBRATION_EXAMPLES}}``)."""

    score_prompt: str
    followup_prompt: str
    system_prompt: str = ""
    examples: tuple[CalibrationExample, ...] = ()

    @property
    def prompt_hash(self) -> str:
        """EP-0028's criteria hash: SHA256 of the score and follow-up prompts concatenated.
        A system prompt, when there is one, comes first with a NUL after it; worked examples,
        when there are any, come last, after a NUL, as canonical JSON (which spells a NUL
        ``\\u0000``, so no text can pass for them). Without either the hash is EP-0028's exactly,
        so every score made before versions existed keeps its meaning."""
        head = self.system_prompt + _SYSTEM_SEPARATOR if self.system_prompt else ""
        tail = _SYSTEM_SEPARATOR + examples_json(self.examples) if self.examples else ""
        text = head + self.score_prompt + self.followup_prompt + tail
        return hashlib.sha256(text.encode("utf-8")).hexdigest()


def examples_json(examples) -> str:
    """Worked examples as the canonical JSON the hash reads."""
    return json.dumps(
        [asdict(example) for example in examples], sort_keys=True, ensure_ascii=False, separators=(",", ":")
    )


# The criteria this service ships (migration 0028 seeds them as the first current version).
SHIPPED_CRITERIA = Criteria(
    score_prompt=JUDGE_PROMPT_SCORE, followup_prompt=JUDGE_PROMPT_FOLLOWUP_MISSING_TOOLS
)
PROMPT_HASH = SHIPPED_CRITERIA.prompt_hash

OUTPUT_SCHEMA_SCORE = (
    "You MUST end your response with a single line containing ONLY the total score as an integer (0-100)"
)

# Sent once, in the same conversation, when the turn-1 reply has no usable
# score line. Not part of the criteria: it asks for nothing new.
RESTATE_SCORE_PROMPT = (
    "Your previous response did not end with a valid total score. Reply with ONLY the total "
    "score you gave, as an integer from 0 to 100, on a single line, with no other text."
)

# Sent once, in the same conversation, when the turn-1 reply gives a score without the
# evaluation the score prompt asks for (``replies.has_evaluation``). Not part of the criteria
# either: it asks again for what the score prompt asks, in its words.
EVALUATION_FOLLOWUP_PROMPT = (
    "Your previous response gave a score without the critical evaluation the instructions require. "
    "Write that evaluation now, as the instructions say: for each of the four categories (Logical Flow, "
    "Consistency, Tool Relevance, Synthesis Quality), what the investigation did and failed to do and "
    "the points you deduct, then the score breakdown (Logical Flow: X/25, Consistency: Y/25, "
    "Tool Relevance: Z/25, Synthesis Quality: W/25). " + OUTPUT_SCHEMA_SCORE + "."
)

_PLACEHOLDER = re.compile(
    r"\{\{(SESSION_CONVERSATION|ALERT_DATA|OUTPUT_SCHEMA|CALIBRATION_EXAMPLES)\}\}"
)
EXAMPLES_PLACEHOLDER = "{{CALIBRATION_EXAMPLES}}"


def criteria_problems(criteria: Criteria) -> list[str]:
    """What makes these prompts unusable as criteria, one sentence each (empty: usable).

    The score prompt must place the session (``{{SESSION_CONVERSATION}}``); the follow-up and
    the system prompt are sent as they are, so a placeholder in them would reach the judge
    unfilled.
    """
    problems = []
    if not criteria.score_prompt.strip():
        problems.append("The score prompt is empty.")
    elif "{{SESSION_CONVERSATION}}" not in criteria.score_prompt:
        problems.append(
            "The score prompt has no {{SESSION_CONVERSATION}} placeholder: the judge would not see the session."
        )
    if criteria.examples and EXAMPLES_PLACEHOLDER not in criteria.score_prompt:
        problems.append(
            f"The score prompt has no {EXAMPLES_PLACEHOLDER} placeholder: "
            "the judge would not see the examples."
        )
    if not criteria.followup_prompt.strip():
        problems.append("The follow-up prompt is empty.")
    for name, text in (
        ("follow-up prompt", criteria.followup_prompt),
        ("system prompt", criteria.system_prompt),
    ):
        if _PLACEHOLDER.search(text):
            problems.append(
                f"The {name} has a placeholder ({{{{...}}}}); only the score prompt is filled in."
            )
    for name, text in (
        ("score prompt", criteria.score_prompt),
        ("follow-up prompt", criteria.followup_prompt),
        ("system prompt", criteria.system_prompt),
    ):
        if _SYSTEM_SEPARATOR in text:
            problems.append(f"The {name} has a NUL character.")
    return problems


def fill_placeholders(template: str, values: dict[str, str]) -> str:
    """Replace each ``{{NAME}}`` of the template with ``values[NAME]``, once.

    The template is scanned a single time and inserted values are never scanned
    again, so placeholder-like text inside session data stays as it is.
    """
    return _PLACEHOLDER.sub(lambda match: values[match.group(1)], template)


# Rough: about 4 characters a token for English text and JSON; for the token
# estimates (score_sessions --dry-run, SCORING_MAX_INPUT_TOKENS).
CHARS_PER_TOKEN = 4


def estimated_tokens(chars: int) -> int:
    return -(-chars // CHARS_PER_TOKEN)

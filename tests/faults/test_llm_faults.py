"""The judge LLM misbehaves: every scoring ends failed with the fault's reason,
nothing is stuck, no event is lost, and a re-score completes once the judge recovers."""

import pytest

from tests.faults import scenarios

pytestmark = pytest.mark.processes


@pytest.mark.parametrize("fault", scenarios.LLM_FAULTS, ids=lambda fault: fault.name)
def test_scorings_fail_with_the_fault_reason_and_recover(fault_stack, fault):
    figures = scenarios.llm_fault(fault_stack, fault, count=3)

    assert figures.failed_with(fault.reason) == 3, figures
    assert figures.completed == 1, figures  # the re-score after recovery
    assert (figures.stuck, figures.events_lost, figures.duplicated) == (0, 0, 0), figures
    assert figures.events_stored == 2 * figures.attempted  # started + completed/failed for each

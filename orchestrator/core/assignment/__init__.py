"""The KIP-441 assignor (pure): see `assignor` for the rules and theory of operation."""

from __future__ import annotations

from orchestrator.core.assignment.assignor import assign, owner_changes
from orchestrator.core.assignment.model import (
    Assignment,
    AssignmentConfig,
    AssignmentError,
    Move,
    ProcessorAssignment,
    ProcessorSnapshot,
    TaskInfo,
)

__all__ = [
    "Assignment", "AssignmentConfig", "AssignmentError", "Move", "ProcessorAssignment",
    "ProcessorSnapshot", "TaskInfo", "owner_changes", "assign",
]

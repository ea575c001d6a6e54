"""The `[job]` section of the TOML configuration (re-exported by orchestrator.wire.config).

Pinned keys (docs/configuration.md, "[job]"): name, class, inputs, output, grouping, partitioner,
expansion_grace_ms. The others are the job author's: `[job.params]`, further output
topics (`outputs`), the key and value formats, and where the job's code lives (`path`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from orchestrator.wire.partitioners import PartitionerName

__all__ = ["Format", "JobConfig", "Section"]

# how a record's key or value reaches process() and how an output's is produced:
# bytes as they are (the pinned behaviour), UTF-8 text, or a JSON document
Format = Literal["bytes", "str", "json"]


class Section(BaseModel):
    """A config table: unknown keys are errors (a misspelt key must not be ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)


class JobConfig(Section):
    name: str = Field(pattern=r"^[A-Za-z0-9._-]+$")
    """The job's name: it names the consumer group, transactional ids and Baton's topics."""
    params: dict[str, Any] = Field(default_factory=dict)
    """`[job.params]`: the job's own settings, given to it as `Job.params`, read-only."""
    class_: str = Field(alias="class", pattern=r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
    """Import path `module:Class` of the `processor.Job` subclass to run."""
    path: list[str] = Field(default_factory=list, examples=[["jobs"]])
    """Directories of the job's code (one, or a list; relative to the config file), put
    first on sys.path before `class` is imported: by processors, `baton check`, `dev`
    and `audit`, and zipped to Spark executors."""
    inputs: list[str] = Field(min_length=1)
    """The input topics (distinct); the grouping makes tasks of their partitions."""
    output: str = Field(min_length=1)
    """The topic `(key, value)` pairs and `Output`s without a topic go to, in the task's
    transaction."""
    outputs: list[str] = Field(default_factory=list, examples=[["alerts", "audit"]])
    """Further topics an `Output(topic=...)` may name (distinct, no input); each is
    checked and created like `output`. Another topic fails the record (`on_error`)."""
    key_format: Format = Field(default="bytes", examples=["str"])
    """How record keys reach process() and output keys are produced: `bytes` as they are,
    `str` (UTF-8) or `json`; a key that does not decode fails the record (`on_error`)."""
    value_format: Format = Field(default="bytes", examples=["json"])
    """The same for record and output values."""
    grouping: Literal["partition", "ssp", "cogroup", "single"] = "partition"
    """How input partitions become tasks (see docs/design.md, "Words")."""
    partitioner: PartitionerName = "consistent_random"
    """The producers' key -> partition function; a split's key filter must agree."""
    expansion_grace_ms: int = Field(default=300000, ge=0, le=86_400_000)
    """How stale producers' metadata may be after an expansion (their refresh interval)."""

    @field_validator("inputs")
    @classmethod
    def _distinct(cls, inputs: list[str]) -> list[str]:
        if len(set(inputs)) != len(inputs) or any(not t for t in inputs):
            raise ValueError("inputs must be distinct, non-empty topic names")
        return inputs

    @field_validator("path", mode="before")
    @classmethod
    def _one_or_more(cls, path: Any) -> Any:
        return [path] if isinstance(path, str) else path

    @field_validator("path")
    @classmethod
    def _directories(cls, path: list[str]) -> list[str]:
        if any(not p for p in path):
            raise ValueError("path entries must be non-empty directory names")
        return path

    @model_validator(mode="after")
    def _outputs(self) -> JobConfig:
        if len(set(self.outputs)) != len(self.outputs) or any(not t for t in self.outputs):
            raise ValueError("job.outputs must be distinct, non-empty topic names")
        looped = set(self.outputs) & set(self.inputs)
        if looped:
            raise ValueError(f"job.outputs: {sorted(looped)} is also an input (the job "
                             f"would read its own output)")
        return self

    @property
    def output_topics(self) -> tuple[str, ...]:
        """Every topic the job may write to: `output` first, then `outputs`."""
        return (self.output, *(t for t in self.outputs if t != self.output))

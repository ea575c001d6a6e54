"""Developer tooling: the embedded broker profile and the demo."""

"""The coordinator process: main loop, service, HTTP API, partition monitor."""

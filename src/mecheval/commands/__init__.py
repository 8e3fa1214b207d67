"""CLI command groups; each module exposes `register(app: typer.Typer)`."""

"""Tools that land finished runs into results/ by the commit rule (docs/development.md)."""

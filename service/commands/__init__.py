"""Command-line commands, one module per concern; `service.cli` collects them."""

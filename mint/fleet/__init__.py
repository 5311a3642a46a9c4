"""What serves: reports from serving processes (`report`, `records`), what the fleet serves and
served (`reads`), divergence from a channel's holder as events (`signals`), and the reporting
thread a serving process runs (`reporter`). docs/fleet.md describes it for its users."""

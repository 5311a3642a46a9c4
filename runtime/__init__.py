"""The MoL runtime: loads a set onto a frozen base, routes, answers and serves."""

"""mint as a client of the Hugging Face Hub: settings, the client, and pulling adapters and sets.

The registry's side, serving the Hub's download protocol, is `mint.registry.hf_protocol`.
"""

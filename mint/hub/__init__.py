"""The Hugging Face Hub: settings, the client, and pulling adapters and sets."""

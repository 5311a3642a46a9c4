"""The contract and mol.toml texts that several test modules commit, written once here.

A test that needs a variant derives it with `str.replace`, so that what it changes is
visible where it is used.
"""

# --- contracts (`mint contract add FILE`) ------------------------------------------------

# `prod` guards production: metric acc at least 0.5.
PROD = """
name = "prod"
channel = "production"
[[metric]]
name = "acc"
min = 0.5
"""

# `prod` as above, and a promote needs two approvals.
PROD_TWO_APPROVALS = """
name = "prod"
channel = "production"
approvals = 2
[[metric]]
name = "acc"
min = 0.5
"""

# `production` guards the channel of its name: accuracy at least 0.5.
PRODUCTION_ACCURACY = """
name = "production"
channel = "production"
[[metric]]
name = "accuracy"
min = 0.5
"""

# `release` guards the channel of its name: accuracy at least 0.5 and one approval.
RELEASE_ACCURACY = """
name = "release"
channel = "release"
approvals = 1
[[metric]]
name = "accuracy"
min = 0.5
"""

# --- sets (`mint set commit mol.toml`; each names route.md and summary.md) ---------------

# macaron over the member lines of `support.loop.build_set`: router, chat, coding, summary.
MACARON = """
name = "macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "router"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "chat"
coding = "coding"
[summary]
adapter = "summary"
prompt = "summary.md"
"""

# macaron whose members are named by a tag and a channel: router@v1, chat@production.
MACARON_BY_REFS = """
name = "macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "router@v1"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "chat@production"
coding = "coding"
[summary]
adapter = "chat"
prompt = "summary.md"
"""

# team/macaron, a namespaced set whose chat expert is the line team/chat.
TEAM_MACARON = """
name = "team/macaron"
protocol = "mol/1"
base = "tiny-llama"
[router]
adapter = "router@v1"
labels = ["chat", "coding"]
prompt = "route.md"
default = "chat"
[experts]
chat = "team/chat@production"
coding = "coding"
[summary]
adapter = "team/chat"
prompt = "summary.md"
"""

"""A long, deterministic, multi-topic conversation with facts planted in its early turns.

It stands in for a real agent session: a developer and an assistant build a web service
over ~240 turns — auth, database, deployment, frontend, observability and billing first
(where every planted fact lives), then testing, documentation, performance and a
refactor. Most turns are filler of the kind real sessions are full of: questions,
explanations, code, tool output, "ok, thanks". The planted facts are decisions, numbers,
names, file paths and open items, each stated once, in passing, inside a longer message.

Each fact has a ``needle``: a distinctive piece of its text. A fact survives compression
when its needle is still in what would be sent to the model (summary + kept messages).
``build()`` checks that no needle appears anywhere but in its own planting message, so
only the summary can carry a fact once its turn has been compacted away.
"""

from __future__ import annotations

import random
from dataclasses import dataclass

SEED = 20240611


@dataclass(frozen=True)
class Fact:
    needle: str
    kind: str  # decision | number | name | path | open item
    text: str


@dataclass(frozen=True)
class Conversation:
    messages: tuple[tuple[str, str], ...]  # (role, content)
    facts: tuple[Fact, ...]
    turns: int
    planted_until_turn: int  # every fact is planted at or before this turn

    def survived(self, context_text: str) -> list[Fact]:
        return [f for f in self.facts if f.needle in context_text]


# --- the facts ---------------------------------------------------------------------------
# topic -> facts; each fact is one sentence, said once, by the user (u) or the assistant (a).
FACTS: dict[str, list[tuple[str, str, str, str]]] = {
    "auth": [
        ("u", "decision", "OAuth2 password flow",
         "Let's go with the OAuth2 password flow and JWT bearer tokens instead of server-side sessions."),
        ("a", "number", "30 minutes",
         "I set the access token lifetime to 30 minutes, which keeps a stolen token short-lived."),
        ("u", "number", "14 days",
         "Refresh tokens should expire after 14 days, and rotating them on every use is fine."),
        ("a", "decision", "argon2id",
         "We hash passwords with argon2id rather than bcrypt, using the library defaults."),
        ("a", "path", "app/auth/jwt.py",
         "All token encoding and decoding now lives in app/auth/jwt.py so nothing else touches the secret."),
        ("u", "number", "5 failed logins",
         "Lock the account for a while after 5 failed logins in a row."),
    ],
    "database": [
        ("u", "decision", "PostgreSQL 16",
         "Decision: we use PostgreSQL 16 for the main database, not MySQL."),
        ("a", "number", "pool size of 20",
         "The engine is configured with a pool size of 20 and a max overflow of 10 per instance."),
        ("u", "name", "Tomás",
         "Tomás owns the schema, so every migration needs his review."),
        ("a", "path", "migrations/versions",
         "Alembic keeps its revisions in migrations/versions and each one gets a descriptive slug."),
        ("u", "number", "35 days",
         "Nightly backups are kept for 35 days before they are pruned."),
    ],
    "deployment": [
        ("u", "decision", "ECS Fargate",
         "We agreed to run the API on AWS ECS Fargate instead of managing our own cluster."),
        ("a", "name", "eu-west-1",
         "Everything is provisioned in eu-west-1 because most customers are in Europe."),
        ("u", "name", "Priya",
         "Priya is the on-call engineer during launch week."),
        ("a", "path", ".github/workflows/deploy.yml",
         "The pipeline is defined in .github/workflows/deploy.yml and deploys on every merge to main."),
        ("u", "decision", "every Tuesday",
         "Production releases go out every Tuesday morning, never on Fridays."),
    ],
    "frontend": [
        ("u", "decision", "Next.js 14",
         "The web app will be built with Next.js 14 and TypeScript."),
        ("u", "name", "Lena",
         "Lena owns the design system, so ask her before adding new components."),
        ("a", "path", "web/src/components",
         "Shared components go under web/src/components with one folder per component."),
        ("u", "number", "Lighthouse score of 90",
         "We need a Lighthouse score of 90 or better on the landing page before launch."),
    ],
    "observability": [
        ("u", "decision", "Prometheus and Grafana",
         "We settled on Prometheus and Grafana for metrics instead of paying for a hosted tool."),
        ("a", "number", "300 ms",
         "The latency objective is a p99 of 300 ms for the public API."),
        ("u", "name", "#api-alerts",
         "Alerts should go to the #api-alerts channel in Slack."),
        ("u", "name", "Marcus",
         "Marcus from the platform team reviews every alert rule before it is enabled."),
    ],
    "billing": [
        ("u", "decision", "Stripe Checkout",
         "We decided to use Stripe Checkout for payments rather than building our own forms."),
        ("a", "number", "$29 per month",
         "The Pro plan costs $29 per month with a 14-day trial."),
        ("u", "open item", "SAML single sign-on",
         "Open question: do enterprise customers need SAML single sign-on before they can sign?"),
        ("u", "open item", "which CDN",
         "TODO: we still have to decide which CDN serves the static assets."),
    ],
}

# --- the filler ---------------------------------------------------------------------------
VOCAB: dict[str, list[str]] = {
    "auth": ["the login endpoint", "token refresh", "the current-user dependency",
             "password reset", "the auth middleware", "scopes", "logout", "the user model"],
    "database": ["the ORM models", "connection handling", "transactions", "the repository layer",
                 "indexes on the orders table", "slow queries", "soft deletes", "seed data"],
    "deployment": ["the container image", "health checks", "environment variables",
                   "secrets", "rollbacks", "the load balancer", "zero-downtime deploys",
                   "the staging environment"],
    "frontend": ["the login form", "client-side routing", "form validation", "the dashboard page",
                 "dark mode", "loading states", "error boundaries", "the API client"],
    "observability": ["structured logging", "request tracing", "the error rate", "dashboards",
                      "log sampling", "alert fatigue", "the request id header", "uptime checks"],
    "billing": ["webhooks", "failed payments", "invoices", "plan upgrades", "proration",
                "the pricing page", "refunds", "tax handling"],
    "testing": ["fixtures", "integration tests", "the test database", "mocking the clock",
                "flaky tests", "coverage", "contract tests", "test data builders"],
    "docs": ["the README", "the API reference", "onboarding notes", "architecture diagrams",
             "the changelog", "code comments", "runbooks", "examples"],
    "performance": ["response caching", "N+1 queries", "pagination", "connection reuse",
                    "payload size", "background jobs", "cold starts", "batch endpoints"],
    "refactor": ["the service layer", "module boundaries", "dead code", "naming",
                 "the settings object", "error handling", "type hints", "circular imports"],
}

TOPIC_OPENERS = {
    "auth": "I'm building a FastAPI backend and need user authentication. Where do we start?",
    "database": "Next up is the database layer. What should we look at first?",
    "deployment": "Let's talk about deployment now.",
    "frontend": "Time to plan the frontend.",
    "observability": "We need monitoring and alerting before launch.",
    "billing": "Let's set up billing and subscriptions.",
    "testing": "Can we go over the testing strategy?",
    "docs": "The docs are thin. How should we structure them?",
    "performance": "Some endpoints feel slow. Can you help me find why?",
    "refactor": "The codebase grew fast. I'd like to clean it up.",
}

USER_FILLER = [
    "Can you explain how {x} fits together with {y}?",
    "ok, makes sense",
    "What would you do about {x}?",
    "Thanks, that helps.",
    "Show me a small example for {x}.",
    "Hmm, is {x} really worth the extra complexity",
    "Got it. And {y}?",
    "Sounds good to me.",
    "Could you walk me through {x} step by step",
    "I tried that and it works now.",
    "Wait, why does {x} matter here",
    "Let me try that and get back to you.",
]

ASSISTANT_FILLER = [
    "Good question.",
    "In general, {x} is easier to reason about when it has a single owner.",
    "The usual approach is to keep {x} small and test it in isolation.",
    "You could also wrap {x} in a helper so the handlers stay thin.",
    "There is a trade-off here: {x} adds a little work up front but makes failures visible.",
    "I would start simple and revisit {x} once there is real traffic.",
    "Most teams handle {x} in one place and keep {y} unaware of it.",
    "It helps to write down how {x} is supposed to behave before changing it.",
    "That keeps {y} decoupled from {x}, which pays off when requirements change.",
    "If {x} ever becomes a bottleneck, measure it first rather than guessing.",
    "A common mistake is to let {x} leak into every module.",
    "This pattern also makes {y} straightforward to test.",
    "Keep the error messages for {x} short and actionable.",
    "Nothing here is specific to our stack; it is just good hygiene for {x}.",
    "I would not over-engineer {x} at this stage.",
]

CODE_SNIPPETS = [
    '```python\n@router.get("/items/{{item_id}}")\n'
    "async def read_item(item_id: int, user=Depends(current_user)):\n"
    '    item = await service.get(item_id, owner=user.id)\n    if item is None:\n'
    '        raise HTTPException(status_code=404)\n    return item\n```',
    "```python\ndef test_{name}(client, user_factory):\n    user = user_factory()\n"
    '    resp = client.get("/me", headers=auth_header(user))\n    assert resp.status_code == 200\n```',
    "```python\nclass Settings(BaseSettings):\n    debug: bool = False\n"
    "    request_timeout: float = 5.0\n    model_config = SettingsConfigDict(env_prefix='APP_')\n```",
    "```ts\nexport async function fetchJson<T>(url: string): Promise<T> {{\n"
    "  const res = await fetch(url, {{ credentials: 'include' }});\n"
    "  if (!res.ok) throw new Error(`HTTP ${{res.status}}`);\n  return res.json() as Promise<T>;\n}}\n```",
]

TOOL_OUTPUTS = [
    "$ pytest -q\n........................................ [ 80%]\n..........  [100%]\n50 passed in 3.21s",
    "$ git status --short\n M {name}.py\n M tests/test_{name}.py\n?? notes.md",
    "$ curl -s localhost:8000/health\n{{\"status\":\"ok\",\"version\":\"0.4.2\",\"uptime\":1234}}",
    "$ ruff check .\nAll checks passed!",
]

EARLY = ["auth", "database", "deployment", "frontend", "observability", "billing"]
LATE = ["testing", "docs", "performance", "refactor"]


def build(turns: int = 240, seed: int = SEED) -> Conversation:
    """The conversation, the same every time for the same arguments."""
    rng = random.Random(seed)
    early_turns = int(turns * 0.6)
    per_early = early_turns // len(EARLY)
    per_late = (turns - per_early * len(EARLY)) // len(LATE)
    messages: list[tuple[str, str]] = []
    facts: list[Fact] = []
    turn = 0
    last_planted = 0
    plan = [(t, per_early) for t in EARLY] + [(t, per_late) for t in LATE]
    plan[-1] = (plan[-1][0], turns - per_early * len(EARLY) - per_late * (len(LATE) - 1))
    for topic, count in plan:
        planted = FACTS.get(topic, [])
        # spread the facts over the topic's turns, never on its opening turn
        slots = sorted(rng.sample(range(1, count), len(planted))) if planted else []
        at = dict(zip(slots, planted, strict=True))
        for i in range(count):
            turn += 1
            fact = at.get(i)
            user, assistant = _turn(rng, topic, i, fact)
            messages.append(("user", user))
            if rng.random() < 0.12 and fact is None:
                name = rng.choice(["auth", "orders", "billing", "users", "search"])
                messages.append(("assistant", "Let me check the current state first."))
                messages.append(("tool", rng.choice(TOOL_OUTPUTS).format(name=name)))
            messages.append(("assistant", assistant))
            if fact is not None:
                facts.append(Fact(fact[2], fact[1], fact[3]))
                last_planted = turn
    conv = Conversation(tuple(messages), tuple(facts), turn, last_planted)
    _check(conv)
    return conv


def _turn(rng: random.Random, topic: str, i: int, fact: tuple[str, str, str, str] | None
          ) -> tuple[str, str]:
    vocab = VOCAB[topic]

    def fill(template: str) -> str:
        x, y = rng.sample(vocab, 2)
        return template.format(x=x, y=y)

    user = TOPIC_OPENERS[topic] if i == 0 else fill(rng.choice(USER_FILLER))
    n = rng.randint(3, 8)
    body = [fill(s) for s in rng.sample(ASSISTANT_FILLER, n)]
    if rng.random() < 0.25:
        name = rng.choice(["login", "refresh", "orders", "invoice", "profile"])
        body.insert(rng.randint(1, len(body)), rng.choice(CODE_SNIPPETS).format(name=name))
    if fact is not None:
        who, _, _, text = fact
        if who == "u":
            user = f"{user} {text}" if i and rng.random() < 0.5 else text
        else:
            body.insert(rng.randint(1, len(body)), text)
    return user, _paragraphs(rng, body)


def _paragraphs(rng: random.Random, sentences: list[str]) -> str:
    out, line = [], []
    for s in sentences:
        if s.startswith("```"):
            if line:
                out.append(" ".join(line))
                line = []
            out.append(s)
            continue
        line.append(s)
        if rng.random() < 0.3:
            out.append(" ".join(line))
            line = []
    if line:
        out.append(" ".join(line))
    return "\n\n".join(out)


def _check(conv: Conversation) -> None:
    """Each needle appears in exactly one message, so only a summary can carry it forward."""
    for fact in conv.facts:
        holders = [c for _, c in conv.messages if fact.needle in c]
        if len(holders) != 1:
            raise AssertionError(f"needle {fact.needle!r} appears in {len(holders)} messages")


if __name__ == "__main__":
    c = build()
    print(f"{c.turns} turns, {len(c.messages)} messages, {len(c.facts)} facts, "
          f"planted by turn {c.planted_until_turn}")
    for role, text in c.messages[:12]:
        print(f"[{role}] {text}\n")

"""The demo's conversation (scripts/demo.py): 29 exchanges between a developer and a coding
assistant building an invoicing API, then the developer's ``QUESTION`` (59 messages), which the
model is to answer from the context. Planted for the demo to find again:

- exchange 3 says the port (``PORT``); ``QUESTION`` asks for it back, long after it
  left the newest turns, so only recall can answer it;
- exchange 12 is a ``记住…`` ("remember …") turn, which becomes a persistent memory.
"""

from __future__ import annotations

PORT = "8443"
REMEMBER = "记住：我们只在周二和周四上午发布，周五不上线。"  # remember: we release Tue/Thu mornings only
QUESTION = "Which port did we say the API listens on? I'm writing the nginx upstream block now."

EXCHANGES: list[tuple[str, str]] = [
    ("帮我用 FastAPI 写一个开发票的 API，先搭个骨架。",
     "好的：app/main.py 建 FastAPI 应用，app/routers/invoices.py 放 /invoices 路由，"
     "app/models.py 用 SQLAlchemy 2.0 定义 Invoice 和 LineItem，先跑通创建和查询两个接口。"),
    ("Which database should we use?",
     "PostgreSQL 16 with asyncpg and SQLAlchemy 2.0's async session. Money goes in NUMERIC(12, 2) "
     "columns, never floats, and every invoice row keeps its currency code next to the amount."),
    (f"The service must listen on port {PORT} inside the container; ops already opened it.",
     f"Noted: uvicorn binds 0.0.0.0:{PORT} in the Dockerfile's CMD, and the health check calls "
     f"http://localhost:{PORT}/healthz. Nothing else in the stack uses that port."),
    ("How do we number invoices?",
     "A per-tenant sequence: INV-2026-000123. A Postgres sequence per tenant would be too many "
     "objects, so we keep a counters table and take the next number with SELECT … FOR UPDATE:\n"
     "```python\n"
     "async def next_invoice_number(db: AsyncSession, tenant_id: int) -> str:\n"
     "    row = await db.execute(\n"
     "        select(Counter).where(Counter.tenant_id == tenant_id).with_for_update())\n"
     "    counter = row.scalar_one()\n"
     "    counter.value += 1\n"
     "    return f\"INV-{date.today().year}-{counter.value:06d}\"\n"
     "```"),
    ("What about taxes?",
     "Each line item carries a tax_rate; the invoice stores subtotal, tax_total and total, "
     "computed once at issue time with Decimal and ROUND_HALF_EVEN, so later rate changes never "
     "alter an issued invoice:\n"
     "```python\n"
     "def totals(lines: list[LineItem]) -> tuple[Decimal, Decimal, Decimal]:\n"
     "    cent = Decimal(\"0.01\")\n"
     "    subtotal = sum((l.quantity * l.unit_price for l in lines), Decimal(0))\n"
     "    tax = sum((l.quantity * l.unit_price * l.tax_rate for l in lines), Decimal(0))\n"
     "    subtotal, tax = (x.quantity(cent, ROUND_HALF_EVEN) for x in (subtotal, tax))\n"
     "    return subtotal, tax, subtotal + tax\n"
     "```"),
    ("Can an issued invoice be edited?",
     "No. Issued invoices are immutable; a correction is a credit note that references the "
     "original invoice id. Drafts stay editable until POST /invoices/{id}/issue."),
    ("How do clients authenticate?",
     "OAuth2 client credentials: each tenant gets a client id and secret, the token endpoint "
     "issues a JWT valid for 15 minutes, and every route checks the tenant claim:\n"
     "```python\n"
     "async def current_tenant(token: str = Depends(oauth2_scheme)) -> Tenant:\n"
     "    try:\n"
     "        claims = jwt.decode(token, settings.jwt_key, algorithms=[\"HS256\"])\n"
     "    except jwt.PyJWTError:\n"
     "        raise HTTPException(401, \"invalid or expired token\") from None\n"
     "    return await tenants.get(claims[\"tenant\"])\n"
     "```"),
    ("写一下数据库迁移怎么管理。",
     "用 Alembic：migrations/ 目录，每次模型变更生成一个 revision，CI 里先跑 alembic upgrade head "
     "再跑测试，生产环境由部署脚本在切流量前执行。"),
    ("We need PDFs of invoices.",
     "WeasyPrint renders an HTML template (templates/invoice.html) to PDF. Rendering takes "
     "about 300 ms, so it runs in a background job and the PDF is stored in S3 under "
     "tenant/invoice-number.pdf:\n"
     "```python\n"
     "def render_pdf(invoice_id: int) -> None:\n"
     "    invoice = repo.load(invoice_id)\n"
     "    html = templates.get_template(\"invoice.html\").render(invoice=invoice)\n"
     "    pdf = HTML(string=html).write_pdf()\n"
     "    s3.put_object(Bucket=BUCKET, Key=f\"{invoice.tenant}/{invoice.number}.pdf\", Body=pdf)\n"
     "```"),
    ("Which queue for the background jobs?",
     "RQ on the same Redis we use for rate limiting: one queue for PDFs, one for e-mail. "
     "Jobs are idempotent, keyed by invoice id, so a retry never sends two e-mails."),
    ("How do we send invoices by e-mail?",
     "Through the provider's API with a signed link to the PDF, not an attachment. The link "
     "expires after 30 days; the customer portal can always regenerate it."),
    (REMEMBER,
     "好的，我记下了：只在周二和周四上午发布，周五不上线。部署流水线里也加个检查，周五触发时直接失败。"),
    ("Let's add currency conversion.",
     "Rates come from the ECB daily feed, cached for a day. An invoice in a foreign currency "
     "stores the rate it was issued with, so reports can convert without refetching history."),
    ("How should we test the money math?",
     "Property-based tests with Hypothesis: random line items and rates, checking that "
     "total == subtotal + tax_total and that rounding never loses or creates a cent:\n"
     "```python\n"
     "@given(st.lists(line_items(), min_size=1, max_size=50))\n"
     "def test_total_is_subtotal_plus_tax(lines: list[LineItem]) -> None:\n"
     "    subtotal, tax, total = totals(lines)\n"
     "    assert total == subtotal + tax\n"
     "    assert total.as_tuple().exponent == -2\n"
     "```"),
    ("What about rate limiting?",
     "A token bucket per tenant in Redis: 100 requests per minute, bursts up to 200. Over "
     "the limit answers 429 with Retry-After; the PDF download route has its own, lower limit. "
     "The bucket is one Lua script, so two API instances never both take the last token; "
     "its keys expire after two idle minutes, so quiet tenants cost nothing in Redis."),
    ("日志怎么打？",
     "结构化日志用 structlog，输出 JSON，每条带 tenant_id 和 request_id。金额和客户邮箱不进日志，"
     "发票号可以进。"),
    ("How do we handle partial payments?",
     "A payments table: each payment has an amount, a method and a received_at time. The "
     "invoice's status is derived: open, partially_paid, paid or overdue, never stored:\n"
     "```python\n"
     "def status(invoice: Invoice, paid: Decimal, today: date) -> str:\n"
     "    if paid >= invoice.total:\n"
     "        return \"paid\"\n"
     "    if today > invoice.due_date:\n"
     "        return \"overdue\"\n"
     "    return \"partially_paid\" if paid else \"open\"\n"
     "```"),
    ("When is an invoice overdue?",
     "When due_date has passed and the paid amount is below the total. A nightly job marks "
     "reminders: 3, 10 and 30 days after the due date, each one e-mail, never more."),
    ("Can customers pay by card?",
     "Yes, through the payment provider's hosted checkout. Its webhook posts to /webhooks/payments; "
     "we verify the signature, then record the payment idempotently by the provider's event id:\n"
     "```python\n"
     "@router.post(\"/webhooks/payments\")\n"
     "async def payment_webhook(request: Request) -> Response:\n"
     "    event = provider.verify(await request.body(), request.headers[\"signature\"])\n"
     "    await payments.record(event.id, event.invoice_id, event.amount)  # unique on event.id\n"
     "    return Response(status_code=204)\n"
     "```"),
    ("How do we export for accounting?",
     "A CSV export per month and tenant, one row per invoice line, with the ledger account "
     "codes the accountant gave us. It streams rows so a big month never sits in memory: "
     "StreamingResponse over an async generator that reads 500 rows at a time with a "
     "server-side cursor and writes them through csv.writer into a small buffer."),
    ("What about GDPR deletion requests?",
     "Invoices must be kept ten years by law, so we anonymise the customer record (name, "
     "e-mail, address) and keep the invoice amounts and numbers. The request is logged."),
    ("接口文档怎么给前端？",
     "FastAPI 自带 OpenAPI，/docs 给人看，/openapi.json 给前端生成 TypeScript 类型。每次发布时 CI "
     "比对 schema，有破坏性变更就失败。"),
    ("How many workers should uvicorn run?",
     "Two per container, and we scale containers instead: the service is I/O bound, and "
     "a crashed worker only takes half a container's requests with it."),
    ("Where do secrets live?",
     "In the cluster's secret store, mounted as files; the app reads them at start. Nothing "
     "secret in environment variables, in the image or in the repository."),
    ("What do we monitor?",
     "Request rate, error rate and p95 latency per route; queue depth and job failures for "
     "RQ; and one business metric, invoices issued per hour, with an alert if it drops to zero."),
    ("We had a duplicate invoice number in staging.",
     "Two requests took the same counter row without FOR UPDATE in one code path. The fix "
     "routes every issue through next_invoice_number(), and a unique index now backs it up:\n"
     "```sql\n"
     "CREATE UNIQUE INDEX invoices_tenant_number ON invoices (tenant_id, number);\n"
     "```\n"
     "A regression test issues 50 invoices from 10 concurrent tasks and checks the numbers "
     "are 1–50 with no gap and no repeat."),
    ("Let's write the README for the team.",
     "Sections: what the service does, how to run it locally (docker compose up), the "
     "environment it needs, how to run tests, and how releases work. I'll keep it short."),
    ("How does a developer run it locally?",
     "docker compose up starts Postgres, Redis and the API with hot reload; make seed loads "
     "two tenants with sample invoices; make test runs the suite against the same containers. "
     "The compose file pins Postgres 16 and Redis 7, the versions production runs, and mounts "
     "the source so uvicorn --reload picks up every save."),
    ("Anything left before the first release?",
     "Load test the issue endpoint, finish the credit note PDF template, and have the "
     "accountant check one month's CSV export against their system."),
]

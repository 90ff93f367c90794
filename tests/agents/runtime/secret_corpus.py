"""Real-shaped, fake credentials in the surroundings they turn up in (tool output of every
kind), and text that must come through the scrubber untouched. Each secret is invented; each
shape follows the issuer's published format."""

from __future__ import annotations

JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiJ1c3ItOTEyMiIsInRlYW0iOiJvcHMiLCJpYXQiOjE3"
       "NjQwMDAwMDB9.Qm9gWkX3vVq0Jx7yTPr2c5bNw1uHsLdA8eFzKiY4oRg")
PEM_BODY = ("MIIEvQIBADANBgkqhkiG9w0BAQEFAASCBKcwggSjAgEAAoIBAQC7VJTUt9Us8cKj\n"
            "MzEfYyjiWA4R4/M2bS1GB4t7NXp98C3SC6dVMvDuictGeurT8jNbvJZHtCSuYEvu\n")

# (label, secret, the tool output it appears in)
SECRETS: list[tuple[str, str, str]] = [
    ("authorization bearer jwt", JWT, "> GET /v1/me HTTP/1.1\n> Authorization: Bearer {s}\n> Accept: */*"),
    ("bearer anthropic key", "sk-ant-api03-Zq8vR2kLm5NpXw7YtB4cDf6GhJ9sKe3Ua1Vi0Oo-QrStUvWxYzAbCdEfGh_IjKl-MnOpAA",
     'curl -H "Authorization: Bearer {s}" https://api.anthropic.com/v1/messages'),
    ("anthropic admin key", "sk-ant-admin01-Pq7Rs8Tu9Vw0Xy1Za2Bc3De4Fg5Hi6Jk7Lm8No9Pq0Rs1Tu2Vw3Xy4Za5Bc6De7Fg8AA",
     "ANTHROPIC_ADMIN_KEY={s}"),
    ("openai project key", "sk-proj-4fQ9xW2mZ7rT1vB8nK3pL6sD0hJ5gY2cX9eA7uI4oP1qR8tE3wS6zV0bN5mM2kL9jH4gF7dD1sA",
     '{{"openai": {{"key": "{s}", "org": "org-acme"}}}}'),
    ("openai legacy key", "sk-Xy7Bq2Lm9Np4Rs6Tu1Vw8Za3Cd5Ef0Gh2Ij4Kl6Mn8Op", "export OPENAI_API_KEY={s}"),
    ("openai bare key in prose", "sk-Ab3De6Gh9Jk2Mn5Pq8St1Vw4Yz7Bc0Ef3Hi6Lm9Op2", "The key you asked for is {s} — keep it safe."),
    ("openai service account", "sk-svcacct-Ttq1Rw2Ee3Yy4Uu5Ii6Oo7Pp8Aa9Ss0Dd1Ff2Gg3Hh4Jj5", "service key: {s}"),
    ("google api key", "AIzaSyD3x9Kq7Lm2Np5Rs8Tu1Vw4Yz6Bc0Ef3Hi", "https://maps.googleapis.com/maps/api/geocode/json?address=x&key={s}"),
    ("google oauth token", "ya29.a0AfB_byC7Dq9Lm2Np5Rs8Tu1Vw4Yz6Bc0Ef3Hi6Jk9Mn2", "access_token={s}&token_type=Bearer"),
    ("groq key", "gsk_9Lm2Np5Rs8Tu1Vw4Yz6Bc0Ef3Hi6Jk9Mn2Pq5St8Vw1", "GROQ_API_KEY: {s}"),
    ("openrouter key", "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",
     'provider:\n  name: openrouter\n  api_key: "{s}"'),
    ("hugging face token", "hf_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5", "huggingface-cli login --token {s}"),
    ("github classic token", "ghp_R4nD0mL00k1ngT0k3nV4lu3F0rT3st1ng12", "remote: https://x-access-token:{s}@github.com/acme/app.git"),
    ("github fine-grained pat", "github_pat_11ABCDEFG0Qw3Er5Ty7Ui9_Op1As3Df5Gh7Jk9Lz1Xc3Vb5Nm7Qw9Er1Ty3Ui5Op7As9Df1Gh3Jk5Lz7Xc9",
     "GITHUB_TOKEN={s}"),
    ("github app token", "ghs_16C7e42F292c6912E7710c838347Ae178B4a", "token: {s}"),
    ("gitlab token", "glpat-Xy7Bq2Lm9Np4Rs6Tu1Vw", 'git clone "https://oauth2:{s}@gitlab.example.com/team/repo.git"'),
    ("slack bot token", "xoxb-2048123456789-4096123456789-Zq8vR2kLm5NpXw7YtB4cDf6G",
     '{{"ok": true, "bot": {{"token": "{s}"}}}}'),
    ("slack user token", "xoxp-2048123456789-2048123456780-4096123456781-0f9e8d7c6b5a4f3e2d1c0b9a8f7e6d5c", "SLACK_USER_TOKEN={s}"),
    ("slack app token", "xapp-1-A0123BCDEF4-5678901234567-abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789",
     "socket mode: {s}"),
    ("slack webhook", "T00000000/B00000000/XXXXXXXXXXXXXXXXXXXXXXXX", "post to https://hooks.slack.com/services/{s} when done"),
    ("stripe live key", "sk_live_51HqLyjWDarjtT1zdp7dcXwlzVaHFt3rYyCkUTeGk8RqTp", "Stripe.api_key = '{s}'"),
    ("stripe restricted key", "rk_live_51HqLyjWDarjtT1zdRqTp7dcXwlzVaHFt3rYyCkUTeGk8", "STRIPE_KEY={s}"),
    ("stripe webhook secret", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "endpoint_secret = \"{s}\""),
    ("aws access key id", "AKIAIOSFODNN7EXAMPL3", "[default]\naws_access_key_id = {s}"),
    ("aws secret key env", "wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY", "AWS_SECRET_ACCESS_KEY={s}"),
    ("aws secret key json", "je7MtGbClwBF/2Zp9Utk/h3yCo8nvbEXAMPLEKEY", '{{"AccessKeyId": "ASIAY34FZKBOKMUTVV7A", "SecretAccessKey": "{s}"}}'),
    ("aws session key id", "ASIAY34FZKBOKMUTVV7A", "Credentials: {s}"),
    ("postgres url", "s3cr3t-P4ss!word", "DATABASE_URL=postgres://app:{s}@db.internal:5432/prod"),
    ("mysql url in stack trace", "hunter2hunter2", 'File "app.py", line 3, in connect\n  engine = create_engine("mysql://root:{s}@10.0.0.5/shop")'),
    ("redis url without user", "r3disPassw0rd", "CELERY_BROKER_URL=redis://:{s}@cache:6379/0"),
    ("amqp url", "rabbit-Pw-2024", "broker: amqps://guest:{s}@mq.example.com:5671/vhost"),
    ("mongodb srv url", "m0ng0Pa55", "mongodb+srv://admin:{s}@cluster0.abcde.mongodb.net/db"),
    ("pem rsa private key", PEM_BODY, "-----BEGIN RSA PRIVATE KEY-----\n{s}-----END RSA PRIVATE KEY-----\nok"),
    ("pem encrypted key", PEM_BODY, "-----BEGIN ENCRYPTED PRIVATE KEY-----\n{s}-----END ENCRYPTED PRIVATE KEY-----"),
    ("pem cut off", PEM_BODY, "key.pem:\n-----BEGIN PRIVATE KEY-----\n{s}"),
    ("password in yaml", "Tr0ub4dor&3-horse", "database:\n  user: app\n  password: {s}\n"),
    ("client secret in json", "Zq8vR2kLm5NpXw7YtB4cDf6GhJ9sKe3U", '{{"client_id": "web-app", "client_secret": "{s}"}}'),
    ("session cookie header", "s%3AHk3nV9dQ2mPp8rT1xY6zB4wL.Jq7Xk2Lm9Np4Rs6Tu1Vw8Za3Cd5Ef0Gh2Ij4Kl", "< Set-Cookie: connect.sid={s}; Path=/; HttpOnly"),
    ("x-api-key header", "a1b2c3d4e5f6a7b8c9d0e1f2a3b4c5d6", "X-Api-Key: {s}"),
    ("npm token", "npm_Qw3Er5Ty7Ui9Op1As3Df5Gh7Jk9Lz1Xc3Vb5", "//registry.npmjs.org/:_authToken={s}"),
    ("sendgrid key", "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", "SENDGRID_API_KEY={s}"),
]

# Text that must come through exactly as it is.
CLEAN = [
    "The meeting moved to 3 pm; please bring the quarterly report.",
    "Order 123e4567-e89b-12d3-a456-426614174000 shipped; commit 3f786850e387550fdab836ed7e6dc881de23001b.",
    "See https://docs.example.com/guide?page=2#install for the steps.",
    '{"token_type": "bearer", "expires_in": 3600, "token_count": 12345678}',
    "def password_strength(password: str) -> int:\n    return len(password)",
    "Set the password field to required and the api_key to optional.",
    "session: expired; please sign in again",
    "postgres://db.internal:5432/prod (no credentials in this URL)",
    "sk-learn is a nickname for scikit-learn; sk-1 is a short id.",
    "Authorization: [REDACTED]",
]

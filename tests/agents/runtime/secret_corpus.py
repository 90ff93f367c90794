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

# Text that reads random but is no credential, as tools print it: identifiers, digests, UUIDs,
# a data URL's bytes, slugs and paths, minified code, URLs with query strings. Every one must
# come through exactly as it is (the high-entropy rule redacted several before it read words).
_PNG = ("iVBORw0KGgoAAAANSUhEUgAAABAAAAAQCAYAAAAf8/9hAAAABHNCSVQICAgIfAhkiAAAAAlwSFlzAAALEwAACxMB"
        "AJqcGAAAAPRJREFUOI2lk7FKA0EQhr+9xEIQFFSQIGhnY2GhjW9g4WNY+Ai2voOFr2BnYWFhoY2FjY2VIkFQEAQx5nZn"
        "Lc4kl+QuJuDAwDLz7z/zz+yaqmKNv+HPKFx+1X5W5sBtQ7GHA6+EGu4wXwAAAABJRU5ErkJggg==")
BENIGN = [
    "0123456789abcdefghijklmnopqrstuvwxyz-eco-big-output-line\n" * 3,
    "line 4812: 0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZ-0123456789abcdef",
    "zyxwvutsrqponmlkjihgfedcba9876543210-reverse-index",
    "Request 123e4567-e89b-12d3-a456-426614174000 took 41 ms",
    "uuids: f47ac10b-58cc-4372-a567-0e02b2c3d479, 9b1deb4d-3b7d-4bad-9bdd-2b0d7b3dcb6d",
    "commit 9fceb02d0ae598e95dc970b74767f19372d61af8 (HEAD -> main, origin/main)",
    "md5sum: 9e107d9d372bb6826bd81d3542a419d6  archive.tar.gz",
    "sha256:  e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855",
    "SHA-512 (release.zip) = cf83e1357eefb8bdf1542850d66d8007d620e4050b5715dc83f4a921d36ce9ce"
    "47d0d13c5d85f2b0ff8318d2877eec2f63b931bd47417a81a538327af927da3e",
    "image: ghcr.io/acme/api@sha256:9b2a6f0c0b51a4cfc4e2f1e7d8b3a5c6e9f0a1b2c3d4e5f60718293a4b5c6d7e",
    '"integrity": "sha512-v2kDEe57lecTulaDIuNTPy3Ry4gLGJ6Z1O3vE1krgXZNrsQ+5FMKqkQW8Un0hnEmn8rpp06V56rQjKpNplS0g=="',
    '<script src="/app.js" integrity="sha384-oqVuAfXRKap7fdgcCY5uykM6+R9GqQ8K/uxy9rx7HNQlGYl1kPzQho1wx4JwY8wC"></script>',
    f'<img alt="logo" src="data:image/png;base64,{_PNG}">',
    f"![chart](data:image/png;base64,{_PNG})",
    "traceparent: 00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01",
    "trace_id=4bf92f3577b34da6a3ce929d0e0e4736 span_id=00f067aa0ba902b7",
    "pod/web-7f9c8d6b5-x2k4p   1/1   Running   0   3d4h",
    "ULID 01ARZ3NDEKTSV4RRFFQ69G5FAV created",
    "Stripe: pi_3MtwBwLkdIwHu7ix28a3tqPa succeeded for cus_NffrFeUfNV2Hib",
    "2024-11-27-how-we-cut-p99-latency-by-40-percent-with-connection-pooling",
    "/blog/2023/10/05/migrating-from-celery-4-to-celery-5-with-zero-downtime-v2",
    "user_42_profile_image_thumbnail_128x128_retina_2x_compressed_v3.webp",
    "/usr/lib/x86_64-linux-gnu/libssl.so.3 /usr/lib/python3.11/lib-dynload/_ssl.cpython-311-x86_64-linux-gnu.so",
    "projects/my-project-123456/locations/us-central1/functions/resize-image-v2",
    "arn:aws:iam::123456789012:role/service-role/lambda-exec-role-2024",
    "v1.2.3-alpha.4+build.5678 and 2.0.0-rc.1+sha.5114f85",
    "AgentRunStepV2SerializerWithNestedToolCallResults.to_representation()",
    "test_a_worker_killed_mid_turn_is_resumed_from_its_last_step_by_another_worker PASSED",
    'class="md:grid-cols-3 lg:grid-cols-4 xl:max-w-7xl 2xl:px-16 sm:text-base"',
    '!function(e,t){"object"==typeof exports&&"undefined"!=typeof module?module.exports=t():'
    '(e="undefined"!=typeof globalThis?globalThis:e||self).dayjs=t()}(this,function(){var t=1e3,e=6e4,n=36e5}',
    "var a1=function(b2,c3){return b2.map(function(d4){return d4*c3+e5[d4%7]})};",
    "https://www.example.com/search?q=agent+runtime&utm_source=newsletter&utm_medium=email"
    "&utm_campaign=2024Q4&fbclid=IwAR2x9Kq7Lm2Np5Rs8Tu1Vw4Yz6Bc0Ef3Hi",
    "See https://github.com/acme/app/compare/3f786850e387550fdab836ed7e6dc881de23001b...9fceb02d0ae598e95dc9 for the diff",
    "docker run --rm -v $PWD:/src ghcr.io/acme/builder:2024.11.27-3f78685 make release-linux-amd64",
    "Downloading torch-2.5.1+cu121-cp311-cp311-manylinux_2_28_x86_64.whl (780.5 MB)",
    "en_US.UTF-8 fr_FR.UTF-8 de_DE.UTF-8 ja_JP.UTF-8 zh_CN.GB18030",
    "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin:/opt/tools/v12/bin",
    "i-0abcd1234efgh5678 running t3.medium us-east-1a vpc-0a1b2c3d sg-0123456789abcdef0",
    "Base64 of 'hello world': aGVsbG8gd29ybGQ=",
    "tensor([0.1234, 0.5678, 0.9012, 0.3456]) dtype=torch.float32 device=cuda:0",
    "ISBN 978-3-16-148410-0; DOI 10.1000/xyz123-abc456-def789",
    "IBAN DE89 3704 0044 0532 0130 00, order 2024-000123-FR-7731",
    "The cat sat on the mat; 1234567890 is just digits and abcdefghij just letters.",
]

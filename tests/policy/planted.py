"""Realistic fake credentials, built at run time from pieces (the repository itself carries nothing a scanner
would take for a credential), and the recognisable pieces of each that no output may contain."""

from __future__ import annotations

import base64

GITHUB = "ghp_" + "A1b2C3d4E5f6G7h8" + "I9j0K1l2M3n4O5p6Q7r8"
AWS_KEY_ID = "AKIA" + "Q3EGRUVW" + "5XYZ6ABC"
AWS_SECRET = "q7RzT9vWx2Yb4Nc6" + "Md8P/f0Gh1Jk3Lm5Np7Q" + "r9S+"
PEM = ("-----BEGIN RSA " + "PRIVATE KEY-----\n" + "MIIEowIBAAKCAQEA7x9k2Lq" + "Vb3Nw8Zr5Tp1Hd6Gm0Yc4\n"
       + "-----END RSA " + "PRIVATE KEY-----")
SLACK = "https://hooks.slack" + ".com/services/" + "T01ABCDEF/B02GHIJKL/" + "aZ3xY9wV8uT7sR6qP5oN4mL2"
JWT = ("eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9" + "." + "eyJzdWIiOiJhZ2VudC0xIiwiaWF0IjoxNzAwMDAwMDAwfQ" + "."
       + "k3Jf9Qm2Lx8Vn4Rt7Yw1Zp6Hs0Gd5CaBe2")
BASE64_TOKEN = base64.b64encode(("tok_" + "Zq8Lp2Wx7Rn4Kd1Vb6Hs9Tm3").encode()).decode()
PASSWORD = "Pa55" + "-w0rd-" + "Xq7Kz9Lm"  # in URL userinfo
# A chat-bot token no detect-secrets plugin knows in this shape (issue 34): its prefix alone makes it a credential.
SLACK_BOT = "xoxb-" + "0123456789abcdef" + "01234567"
SLACK_BOT_ROTATED = "xoxb-" + "fedcba9876543210" + "fedcba98"

SECRETS = {"github": GITHUB, "aws-key-id": AWS_KEY_ID, "aws-secret": AWS_SECRET, "pem": PEM, "slack": SLACK,
           "jwt": JWT, "base64-token": BASE64_TOKEN}
assert len(AWS_SECRET) == 40 and len(AWS_KEY_ID) == 20

# What identifies each one: its random part (not a well-known prefix such as the webhook host or the PEM header).
DISTINCTIVE = {"github": GITHUB[4:], "aws-key-id": AWS_KEY_ID[4:], "aws-secret": AWS_SECRET, "pem": PEM.split("\n")[1],
               "slack": SLACK.rsplit("/", 3)[-1], "jwt": JWT.rsplit(".", 1)[-1], "base64-token": BASE64_TOKEN,
               "password": PASSWORD, "slack-bot": SLACK_BOT[5:], "slack-bot-rotated": SLACK_BOT_ROTATED[5:]}


def pieces(secret: str, size: int = 10) -> set[str]:
    """Every run of `size` characters of a secret's distinctive part: an output holding one shows a piece."""
    return {secret[i:i + size] for i in range(len(secret) - size + 1)} or {secret}


def leaked(output: str) -> list[str]:
    """Which planted secrets `output` shows, whole or in a recognisable piece."""
    return [name for name, secret in DISTINCTIVE.items() if any(p in output for p in pieces(secret))]

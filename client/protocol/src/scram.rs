//! SCRAM-SHA-256 (RFC 5802 with RFC 7677's hash) and SCRAM-SHA-512 (the
//! same exchange with SHA-512, as Kafka offers it), with no I/O and no
//! randomness: nonces and salts are passed in. The broker and the client use
//! the same code; AUTHENTICATE carries these messages as they are (with
//! SCRAM-SHA-256; the Kafka listener takes both).
//!
//! ```text
//! client-first  n,,n=<user>,r=<client nonce>
//! server-first  r=<client nonce><server nonce>,s=<base64 salt>,i=<iterations>
//! client-final  c=biws,r=<nonce>,p=<base64 proof>
//! server-final  v=<base64 server signature>  |  e=<error>
//! ```
//!
//! The broker stores only a [`Verifier`] per user (salt, iterations,
//! StoredKey, ServerKey), never the password. Proofs are compared in
//! constant time. Channel binding is not offered (`n,,`); TLS protects the
//! exchange from the network, SCRAM keeps the password off it and off disk.
//! Names and passwords are used as UTF-8 bytes, without SASLprep.

use base64::engine::general_purpose::STANDARD as B64;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use sha2::{Digest, Sha256, Sha512};
use subtle::ConstantTimeEq;

/// The mechanism's name, as SASL spells it.
pub const MECHANISM: &str = "SCRAM-SHA-256";
/// SCRAM with SHA-512, as SASL spells it.
pub const MECHANISM_SHA512: &str = "SCRAM-SHA-512";

/// The hash a SCRAM exchange is made with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScramHash {
    /// SHA-256 (RFC 7677).
    Sha256,
    /// SHA-512.
    Sha512,
}

impl ScramHash {
    /// The SASL mechanism's name.
    pub fn mechanism(self) -> &'static str {
        match self {
            ScramHash::Sha256 => MECHANISM,
            ScramHash::Sha512 => MECHANISM_SHA512,
        }
    }

    /// The hash of a SASL mechanism's name, if it is a SCRAM one offered here.
    pub fn from_mechanism(m: &str) -> Option<ScramHash> {
        match m {
            MECHANISM => Some(ScramHash::Sha256),
            MECHANISM_SHA512 => Some(ScramHash::Sha512),
            _ => None,
        }
    }

    /// Bytes of a digest (and of a key, a proof, a signature).
    pub fn digest_len(self) -> usize {
        match self {
            ScramHash::Sha256 => 32,
            ScramHash::Sha512 => 64,
        }
    }

    fn hmac(self, key: &[u8], data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => hmac(key, data).to_vec(),
            ScramHash::Sha512 => hmac512(key, data).to_vec(),
        }
    }

    fn digest(self, data: &[u8]) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => Sha256::digest(data).to_vec(),
            ScramHash::Sha512 => Sha512::digest(data).to_vec(),
        }
    }

    /// SaltedPassword := PBKDF2(HMAC, password, salt, iterations): what a
    /// Kafka admin client sends in AlterUserScramCredentials (never the
    /// password itself).
    pub fn salted_password(self, password: &str, salt: &[u8], iterations: u32) -> Vec<u8> {
        match self {
            ScramHash::Sha256 => salted_password(password, salt, iterations).to_vec(),
            ScramHash::Sha512 => salted_password512(password, salt, iterations).to_vec(),
        }
    }
}
/// Fewest PBKDF2 iterations a verifier may have (RFC 7677's minimum).
pub const MIN_ITERATIONS: u32 = 4096;
/// Most iterations a client accepts from a server (a bound on the work a
/// broker can make a client do).
pub const MAX_ITERATIONS: u32 = 1_000_000;
/// Longest SCRAM message accepted (a name, a nonce, a proof: well under 1 KiB).
pub const MAX_MESSAGE_BYTES: usize = 1024;

/// Why a SCRAM exchange failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScramError {
    /// A message that is not what SCRAM says it should be.
    #[error("malformed SCRAM message: {0}")]
    Malformed(String),
    /// The proof does not match: wrong password or unknown user (which of
    /// the two is not said).
    #[error("authentication failed: wrong user name or password")]
    Failed,
    /// The server's signature does not match: the server does not know the
    /// password (it is not the broker it claims to be).
    #[error("the server's SCRAM signature is wrong")]
    BadServerSignature,
    /// The server answered with an error (`e=...`).
    #[error("the server refused: {0}")]
    Refused(String),
}

fn malformed(what: impl Into<String>) -> ScramError {
    ScramError::Malformed(what.into())
}

type HmacSha256 = Hmac<Sha256>;

fn hmac(key: &[u8], data: &[u8]) -> [u8; 32] {
    #[allow(clippy::expect_used)]
    let mut m = HmacSha256::new_from_slice(key).expect("HMAC takes any key"); // ok: HMAC accepts keys of every length
    m.update(data);
    m.finalize().into_bytes().into()
}

fn sha256(data: &[u8]) -> [u8; 32] {
    Sha256::digest(data).into()
}

fn hmac512(key: &[u8], data: &[u8]) -> [u8; 64] {
    #[allow(clippy::expect_used)]
    let mut m = Hmac::<Sha512>::new_from_slice(key).expect("HMAC takes any key"); // ok: HMAC accepts keys of every length
    m.update(data);
    m.finalize().into_bytes().into()
}

fn salted_password512(password: &str, salt: &[u8], iterations: u32) -> [u8; 64] {
    let mut out = [0u8; 64];
    pbkdf2::pbkdf2_hmac::<Sha512>(password.as_bytes(), salt, iterations, &mut out);
    out
}

/// What the broker keeps of a password for SCRAM-SHA-512.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier512 {
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: [u8; 64],
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: [u8; 64],
}

impl Verifier512 {
    /// The verifier of `password` with `salt` and `iterations` (at least
    /// [`MIN_ITERATIONS`]; fewer are raised to it).
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> Verifier512 {
        let iterations = iterations.max(MIN_ITERATIONS);
        let salted = salted_password512(password, salt, iterations);
        Verifier512::from_salted_password(&salted, salt, iterations)
    }

    /// The verifier of a password known only as its SaltedPassword (made
    /// with `salt` and `iterations`), as Kafka's AlterUserScramCredentials
    /// carries it.
    pub fn from_salted_password(salted: &[u8; 64], salt: &[u8], iterations: u32) -> Verifier512 {
        Verifier512 {
            salt: salt.to_vec(),
            iterations,
            stored_key: Sha512::digest(hmac512(salted, b"Client Key")).into(),
            server_key: hmac512(salted, b"Server Key"),
        }
    }
}

/// A verifier of either hash, as an exchange uses it.
#[derive(Debug, Clone)]
struct Keys {
    hash: ScramHash,
    salt: Vec<u8>,
    iterations: u32,
    stored_key: Vec<u8>,
    server_key: Vec<u8>,
}

impl From<Verifier> for Keys {
    fn from(v: Verifier) -> Keys {
        Keys {
            hash: ScramHash::Sha256,
            salt: v.salt,
            iterations: v.iterations,
            stored_key: v.stored_key.to_vec(),
            server_key: v.server_key.to_vec(),
        }
    }
}

impl From<Verifier512> for Keys {
    fn from(v: Verifier512) -> Keys {
        Keys {
            hash: ScramHash::Sha512,
            salt: v.salt,
            iterations: v.iterations,
            stored_key: v.stored_key.to_vec(),
            server_key: v.server_key.to_vec(),
        }
    }
}

/// What the broker keeps of a password.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Verifier {
    /// The salt.
    pub salt: Vec<u8>,
    /// PBKDF2 iterations.
    pub iterations: u32,
    /// H(HMAC(SaltedPassword, "Client Key")).
    pub stored_key: [u8; 32],
    /// HMAC(SaltedPassword, "Server Key").
    pub server_key: [u8; 32],
}

fn salted_password(password: &str, salt: &[u8], iterations: u32) -> [u8; 32] {
    let mut out = [0u8; 32];
    pbkdf2::pbkdf2_hmac::<Sha256>(password.as_bytes(), salt, iterations, &mut out);
    out
}

impl Verifier {
    /// The verifier of `password` with `salt` and `iterations` (at least
    /// [`MIN_ITERATIONS`]; fewer are raised to it).
    pub fn new(password: &str, salt: &[u8], iterations: u32) -> Verifier {
        let iterations = iterations.max(MIN_ITERATIONS);
        let salted = salted_password(password, salt, iterations);
        Verifier::from_salted_password(&salted, salt, iterations)
    }

    /// The verifier of a password known only as its SaltedPassword (made
    /// with `salt` and `iterations`), as Kafka's AlterUserScramCredentials
    /// carries it.
    pub fn from_salted_password(salted: &[u8; 32], salt: &[u8], iterations: u32) -> Verifier {
        Verifier {
            salt: salt.to_vec(),
            iterations,
            stored_key: sha256(&hmac(salted, b"Client Key")),
            server_key: hmac(salted, b"Server Key"),
        }
    }
}

/// `saslname`: `,` and `=` escaped as `=2C` and `=3D`.
fn escape_name(name: &str) -> String {
    name.replace('=', "=3D").replace(',', "=2C")
}

fn unescape_name(s: &str) -> Result<String, ScramError> {
    let mut out = String::with_capacity(s.len());
    let mut rest = s;
    while let Some(i) = rest.find('=') {
        out.push_str(&rest[..i]);
        let code = rest
            .get(i + 1..i + 3)
            .ok_or_else(|| malformed("bad escape in name"))?;
        match code {
            "2C" => out.push(','),
            "3D" => out.push('='),
            _ => return Err(malformed("bad escape in name")),
        }
        rest = &rest[i + 3..];
    }
    out.push_str(rest);
    Ok(out)
}

fn check_nonce(n: &str) -> Result<(), ScramError> {
    if n.is_empty() || !n.bytes().all(|b| (0x21..=0x7e).contains(&b) && b != b',') {
        return Err(malformed("nonce must be printable ASCII without commas"));
    }
    Ok(())
}

/// The attribute `key=` at the start of `part`.
fn attr<'a>(part: Option<&'a str>, key: &str) -> Result<&'a str, ScramError> {
    let part = part.ok_or_else(|| malformed(format!("missing {key}=")))?;
    part.strip_prefix(key)
        .and_then(|p| p.strip_prefix('='))
        .ok_or_else(|| malformed(format!("expected {key}=, got {part:?}")))
}

fn utf8(msg: &[u8]) -> Result<&str, ScramError> {
    if msg.len() > MAX_MESSAGE_BYTES {
        return Err(malformed(format!(
            "message is {} bytes, at most {MAX_MESSAGE_BYTES}",
            msg.len()
        )));
    }
    std::str::from_utf8(msg).map_err(|_| malformed("not UTF-8"))
}

fn b64(s: &str, what: &str) -> Result<Vec<u8>, ScramError> {
    B64.decode(s)
        .map_err(|_| malformed(format!("{what} is not base64")))
}

/// The client's first message, parsed: `n,,n=<user>,r=<nonce>`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClientFirst {
    /// The user name.
    pub username: String,
    /// The client's nonce.
    pub nonce: String,
    /// `n=...,r=...` (the part that enters the AuthMessage).
    bare: String,
}

impl ClientFirst {
    /// Parses a client-first message.
    ///
    /// # Errors
    /// [`ScramError::Malformed`]: no `n,,` header (channel binding and
    /// authzid are not supported), a missing name or nonce, extensions.
    pub fn parse(msg: &[u8]) -> Result<ClientFirst, ScramError> {
        let s = utf8(msg)?;
        let bare = s.strip_prefix("n,,").ok_or_else(|| {
            malformed("expected the GS2 header n,, (no channel binding, no authzid)")
        })?;
        let mut parts = bare.split(',');
        let username = unescape_name(attr(parts.next(), "n")?)?;
        if username.is_empty() {
            return Err(malformed("empty user name"));
        }
        let nonce = attr(parts.next(), "r")?.to_owned();
        check_nonce(&nonce)?;
        if parts.next().is_some() {
            return Err(malformed("extensions are not supported"));
        }
        Ok(ClientFirst {
            username,
            nonce,
            bare: bare.to_owned(),
        })
    }
}

/// The server side of one exchange, between its two messages.
#[derive(Debug, Clone)]
pub struct ServerExchange {
    username: String,
    verifier: Keys,
    /// False for an unknown user: the exchange goes on with a made-up
    /// verifier and fails at the end, like a wrong password.
    known: bool,
    client_first_bare: String,
    server_first: String,
    nonce: String,
}

impl ServerExchange {
    /// Answers `first` for a user whose verifier is `verifier` (`None`: no
    /// such user; then `decoy` is used, whose salt the client sees, and the
    /// exchange fails at the end). `server_nonce`: fresh random printable
    /// characters. Returns the exchange and the server-first message.
    ///
    /// # Errors
    /// A server nonce that is not printable ASCII without commas.
    pub fn start(
        first: &ClientFirst,
        verifier: Option<Verifier>,
        decoy: Verifier,
        server_nonce: &str,
    ) -> Result<(ServerExchange, Vec<u8>), ScramError> {
        Self::start_keys(first, verifier.map(Keys::from), decoy.into(), server_nonce)
    }

    /// As [`ServerExchange::start`], for SCRAM-SHA-512.
    ///
    /// # Errors
    /// A server nonce that is not printable ASCII without commas.
    pub fn start_sha512(
        first: &ClientFirst,
        verifier: Option<Verifier512>,
        decoy: Verifier512,
        server_nonce: &str,
    ) -> Result<(ServerExchange, Vec<u8>), ScramError> {
        Self::start_keys(first, verifier.map(Keys::from), decoy.into(), server_nonce)
    }

    fn start_keys(
        first: &ClientFirst,
        verifier: Option<Keys>,
        decoy: Keys,
        server_nonce: &str,
    ) -> Result<(ServerExchange, Vec<u8>), ScramError> {
        check_nonce(server_nonce)?;
        let known = verifier.is_some();
        let verifier = verifier.unwrap_or(decoy);
        let nonce = format!("{}{server_nonce}", first.nonce);
        let server_first = format!(
            "r={nonce},s={},i={}",
            B64.encode(&verifier.salt),
            verifier.iterations
        );
        let out = server_first.clone().into_bytes();
        Ok((
            ServerExchange {
                username: first.username.clone(),
                verifier,
                known,
                client_first_bare: first.bare.clone(),
                server_first,
                nonce,
            },
            out,
        ))
    }

    /// The user name the client gave.
    pub fn username(&self) -> &str {
        &self.username
    }

    /// Checks the client's proof; the server-final message (`v=...`) on success.
    ///
    /// # Errors
    /// [`ScramError::Malformed`], or [`ScramError::Failed`] for a wrong
    /// password or an unknown user (the same answer, after the same work).
    pub fn finish(&self, client_final: &[u8]) -> Result<Vec<u8>, ScramError> {
        let s = utf8(client_final)?;
        let (without_proof, proof) = s
            .rsplit_once(",p=")
            .ok_or_else(|| malformed("missing p="))?;
        let mut parts = without_proof.split(',');
        let cb = attr(parts.next(), "c")?;
        if cb != "biws" {
            return Err(malformed("channel binding must be biws (n,,)"));
        }
        let nonce = attr(parts.next(), "r")?;
        if parts.next().is_some() {
            return Err(malformed("extensions are not supported"));
        }
        let proof = b64(proof, "proof")?;
        let hash = self.verifier.hash;
        if proof.len() != hash.digest_len() {
            return Err(malformed(format!(
                "proof is {} bytes, want {}",
                proof.len(),
                hash.digest_len()
            )));
        }
        // A wrong nonce fails like a wrong proof, after the same work. The
        // nonce must end with the combined one, as Kafka's broker checks it
        // (librdkafka 2.0, as Debian's kcat links it, sends its own nonce once
        // more in front); the
        // proof covers the message as sent, so nothing else is accepted.
        let suffix = nonce
            .len()
            .checked_sub(self.nonce.len())
            .and_then(|start| nonce.as_bytes().get(start..))
            .unwrap_or_default();
        let nonce_ok = suffix.ct_eq(self.nonce.as_bytes())
            & subtle::Choice::from(u8::from(!suffix.is_empty()));
        let auth = format!(
            "{},{},{without_proof}",
            self.client_first_bare, self.server_first
        );
        let signature = hash.hmac(&self.verifier.stored_key, auth.as_bytes());
        let client_key: Vec<u8> = proof.iter().zip(&signature).map(|(p, s)| p ^ s).collect();
        let matches = hash
            .digest(&client_key)
            .as_slice()
            .ct_eq(&self.verifier.stored_key)
            & nonce_ok;
        if !bool::from(matches) || !self.known {
            return Err(ScramError::Failed);
        }
        let server_signature = hash.hmac(&self.verifier.server_key, auth.as_bytes());
        Ok(format!("v={}", B64.encode(server_signature)).into_bytes())
    }
}

/// The client side of one exchange.
#[derive(Debug, Clone)]
pub struct ClientExchange {
    hash: ScramHash,
    password: String,
    nonce: String,
    client_first_bare: String,
    /// Set by [`ClientExchange::respond`]: the expected server signature.
    server_signature: Option<Vec<u8>>,
}

impl ClientExchange {
    /// Starts an exchange for `username` with `nonce` (fresh random printable
    /// characters); the exchange and the client-first message.
    ///
    /// # Errors
    /// An empty name or a bad nonce.
    pub fn start(
        username: &str,
        password: &str,
        nonce: &str,
    ) -> Result<(ClientExchange, Vec<u8>), ScramError> {
        Self::start_with(ScramHash::Sha256, username, password, nonce)
    }

    /// As [`ClientExchange::start`] with the hash `hash`.
    ///
    /// # Errors
    /// An empty name or a bad nonce.
    pub fn start_with(
        hash: ScramHash,
        username: &str,
        password: &str,
        nonce: &str,
    ) -> Result<(ClientExchange, Vec<u8>), ScramError> {
        if username.is_empty() {
            return Err(malformed("empty user name"));
        }
        check_nonce(nonce)?;
        let bare = format!("n={},r={nonce}", escape_name(username));
        let msg = format!("n,,{bare}").into_bytes();
        Ok((
            ClientExchange {
                hash,
                password: password.to_owned(),
                nonce: nonce.to_owned(),
                client_first_bare: bare,
                server_signature: None,
            },
            msg,
        ))
    }

    /// Answers the server-first message with the client-final one.
    ///
    /// # Errors
    /// A malformed message, a nonce that does not extend ours, or
    /// iterations outside [`MIN_ITERATIONS`]..=[`MAX_ITERATIONS`].
    pub fn respond(&mut self, server_first: &[u8]) -> Result<Vec<u8>, ScramError> {
        let s = utf8(server_first)?;
        if let Some(e) = s.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_owned()));
        }
        let mut parts = s.split(',');
        let nonce = attr(parts.next(), "r")?;
        let salt = b64(attr(parts.next(), "s")?, "salt")?;
        let iterations: u32 = attr(parts.next(), "i")?
            .parse()
            .map_err(|_| malformed("iterations are not a number"))?;
        if !nonce.starts_with(&self.nonce) || nonce.len() == self.nonce.len() {
            return Err(malformed("the server's nonce does not extend ours"));
        }
        check_nonce(nonce)?;
        if !(MIN_ITERATIONS..=MAX_ITERATIONS).contains(&iterations) {
            return Err(malformed(format!(
                "{iterations} iterations, want {MIN_ITERATIONS}..={MAX_ITERATIONS}"
            )));
        }
        let h = self.hash;
        let salted = h.salted_password(&self.password, &salt, iterations);
        let client_key = h.hmac(&salted, b"Client Key");
        let stored_key = h.digest(&client_key);
        let without_proof = format!("c=biws,r={nonce}");
        let auth = format!("{},{s},{without_proof}", self.client_first_bare);
        let signature = h.hmac(&stored_key, auth.as_bytes());
        let proof: Vec<u8> = client_key
            .iter()
            .zip(&signature)
            .map(|(c, s)| c ^ s)
            .collect();
        let server_key = h.hmac(&salted, b"Server Key");
        self.server_signature = Some(h.hmac(&server_key, auth.as_bytes()));
        Ok(format!("{without_proof},p={}", B64.encode(proof)).into_bytes())
    }

    /// Checks the server-final message: the server knew the password.
    ///
    /// # Errors
    /// [`ScramError::Refused`] for `e=...`, [`ScramError::BadServerSignature`].
    pub fn verify(&self, server_final: &[u8]) -> Result<(), ScramError> {
        let s = utf8(server_final)?;
        if let Some(e) = s.strip_prefix("e=") {
            return Err(ScramError::Refused(e.to_owned()));
        }
        let got = b64(attr(Some(s), "v")?, "server signature")?;
        let want = self
            .server_signature
            .as_ref()
            .ok_or_else(|| malformed("server-final before server-first"))?;
        if bool::from(got.as_slice().ct_eq(want.as_slice())) {
            Ok(())
        } else {
            Err(ScramError::BadServerSignature)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A verifier made from the SaltedPassword (Kafka's
    /// AlterUserScramCredentials) is the one made from the password.
    #[test]
    fn a_verifier_from_the_salted_password_is_the_passwords() {
        let salted = ScramHash::Sha256.salted_password("pw", b"salt", 4096);
        let v = Verifier::from_salted_password(&salted.try_into().unwrap(), b"salt", 4096);
        assert_eq!(v, Verifier::new("pw", b"salt", 4096));
        let salted = ScramHash::Sha512.salted_password("pw", b"salt", 8192);
        let v = Verifier512::from_salted_password(&salted.try_into().unwrap(), b"salt", 8192);
        assert_eq!(v, Verifier512::new("pw", b"salt", 8192));
    }

    /// RFC 7677, section 3: the worked example, byte for byte.
    #[test]
    fn rfc7677_example() {
        let (mut client, first) =
            ClientExchange::start("user", "pencil", "rOprNGfwEbeRWgbNEkqO").unwrap();
        assert_eq!(first, b"n,,n=user,r=rOprNGfwEbeRWgbNEkqO");
        let salt = B64.decode("W22ZaJ0SNY7soEsUEjb6gQ==").unwrap();
        let verifier = Verifier::new("pencil", &salt, 4096);
        let decoy = Verifier::new("x", b"decoy", 4096);
        let parsed = ClientFirst::parse(&first).unwrap();
        let (server, server_first) = ServerExchange::start(
            &parsed,
            Some(verifier),
            decoy,
            "%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0",
        )
        .unwrap();
        assert_eq!(
            server_first,
            b"r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,s=W22ZaJ0SNY7soEsUEjb6gQ==,i=4096"
        );
        let fin = client.respond(&server_first).unwrap();
        assert_eq!(
            String::from_utf8(fin.clone()).unwrap(),
            "c=biws,r=rOprNGfwEbeRWgbNEkqO%hvYDpWUa2RaTCAfuxFIlj)hNlF$k0,p=dHzbZapWIk4jUhN+Ute9ytag9zjfMHgsqmmiz7AndVQ="
        );
        let server_final = server.finish(&fin).unwrap();
        assert_eq!(
            server_final,
            b"v=6rriTRBi23WpRR/wtup+mMhUZUn/dB5nLTJRsjl95G4="
        );
        client.verify(&server_final).unwrap();
    }

    #[test]
    fn sha512_round_trip_and_wrong_password() {
        let salt = b"0123456789abcdef";
        let decoy = Verifier512::new("", b"decoy-salt", MIN_ITERATIONS);
        for (password, ok) in [("secret", true), ("wrong", false)] {
            let (mut c, first) =
                ClientExchange::start_with(ScramHash::Sha512, "u", password, "abc").unwrap();
            let parsed = ClientFirst::parse(&first).unwrap();
            let v = Verifier512::new("secret", salt, MIN_ITERATIONS);
            let (s, sf) =
                ServerExchange::start_sha512(&parsed, Some(v), decoy.clone(), "xyz").unwrap();
            let fin = c.respond(&sf).unwrap();
            // The proof is a SHA-512 one: 64 bytes.
            let proof = std::str::from_utf8(&fin)
                .unwrap()
                .rsplit_once(",p=")
                .unwrap()
                .1;
            assert_eq!(B64.decode(proof).unwrap().len(), 64);
            match s.finish(&fin) {
                Ok(server_final) => {
                    assert!(ok);
                    c.verify(&server_final).unwrap();
                }
                Err(e) => {
                    assert!(!ok);
                    assert_eq!(e, ScramError::Failed);
                }
            }
        }
        // A SHA-256 client against a SHA-512 exchange fails (its proof is 32 bytes).
        let (mut c, first) = ClientExchange::start("u", "secret", "abc").unwrap();
        let parsed = ClientFirst::parse(&first).unwrap();
        let v = Verifier512::new("secret", salt, MIN_ITERATIONS);
        let (s, sf) = ServerExchange::start_sha512(&parsed, Some(v), decoy, "xyz").unwrap();
        assert!(s.finish(&c.respond(&sf).unwrap()).is_err());
        assert_eq!(
            ScramHash::from_mechanism("SCRAM-SHA-512"),
            Some(ScramHash::Sha512)
        );
        assert_eq!(ScramHash::from_mechanism("SCRAM-SHA-1"), None);
    }

    /// librdkafka 2.0 repeats its nonce in front of the combined one in
    /// client-final; Kafka's broker accepts a nonce that ends with the
    /// combined one, and so does this one. A nonce without the server's part fails.
    #[test]
    fn a_client_final_nonce_ending_with_the_combined_one_is_accepted() {
        let first = ClientFirst::parse(b"n,,n=u,r=cli").unwrap();
        let v = Verifier::new("pw", b"salt", MIN_ITERATIONS);
        let (s, sf) = ServerExchange::start(&first, Some(v.clone()), v, "srv").unwrap();
        assert_eq!(sf, b"r=clisrv,s=c2FsdA==,i=4096");
        let final_with = |nonce: &str| {
            let salted = salted_password("pw", b"salt", MIN_ITERATIONS);
            let client_key = hmac(&salted, b"Client Key");
            let without_proof = format!("c=biws,r={nonce}");
            let auth = format!("n=u,r=cli,r=clisrv,s=c2FsdA==,i=4096,{without_proof}");
            let signature = hmac(&sha256(&client_key), auth.as_bytes());
            let proof: Vec<u8> = client_key
                .iter()
                .zip(signature)
                .map(|(c, s)| c ^ s)
                .collect();
            format!("{without_proof},p={}", B64.encode(proof))
        };
        s.finish(final_with("clisrv").as_bytes()).unwrap();
        s.finish(final_with("cliclisrv").as_bytes()).unwrap();
        for bad in ["cli", "clisr", "srv2", "x"] {
            assert_eq!(
                s.finish(final_with(bad).as_bytes()),
                Err(ScramError::Failed),
                "{bad}"
            );
        }
    }

    #[test]
    fn wrong_password_and_unknown_user_fail_alike() {
        let salt = b"0123456789abcdef";
        let decoy = Verifier::new("", b"decoy-salt", MIN_ITERATIONS);
        for (known, password) in [(true, "wrong"), (false, "secret")] {
            let (mut c, first) = ClientExchange::start("al,i=ce", password, "abc").unwrap();
            let parsed = ClientFirst::parse(&first).unwrap();
            assert_eq!(parsed.username, "al,i=ce");
            let v = known.then(|| Verifier::new("secret", salt, MIN_ITERATIONS));
            let (s, sf) = ServerExchange::start(&parsed, v, decoy.clone(), "xyz").unwrap();
            let fin = c.respond(&sf).unwrap();
            assert_eq!(s.finish(&fin), Err(ScramError::Failed));
        }
    }

    #[test]
    fn a_server_that_does_not_know_the_password_is_caught() {
        let (mut c, first) = ClientExchange::start("u", "pw", "n1").unwrap();
        let parsed = ClientFirst::parse(&first).unwrap();
        let v = Verifier::new("pw", b"salt", MIN_ITERATIONS);
        let (s, sf) = ServerExchange::start(&parsed, Some(v.clone()), v, "n2").unwrap();
        let fin = c.respond(&sf).unwrap();
        s.finish(&fin).unwrap();
        let forged = format!("v={}", B64.encode([7u8; 32]));
        assert_eq!(
            c.verify(forged.as_bytes()),
            Err(ScramError::BadServerSignature)
        );
    }

    proptest::proptest! {
        /// Any bytes as any message: an error or an answer, never a panic.
        #[test]
        fn garbage_never_panics(a in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..200),
                                b in "[ -~]{0,120}") {
            let _ = ClientFirst::parse(&a);
            let _ = ClientFirst::parse(format!("n,,{b}").as_bytes());
            // PBKDF2 once for all cases (it is slow in debug builds).
            static SERVER: std::sync::OnceLock<ServerExchange> = std::sync::OnceLock::new();
            let s = SERVER.get_or_init(|| {
                let first = ClientFirst::parse(b"n,,n=u,r=abc").unwrap();
                let v = Verifier::new("pw", b"salt", MIN_ITERATIONS);
                ServerExchange::start(&first, Some(v.clone()), v, "def").unwrap().0
            });
            let _ = s.finish(&a);
            let _ = s.finish(b.as_bytes());
            static SERVER512: std::sync::OnceLock<ServerExchange> = std::sync::OnceLock::new();
            let s = SERVER512.get_or_init(|| {
                let first = ClientFirst::parse(b"n,,n=u,r=abc").unwrap();
                let v = Verifier512::new("pw", b"salt", MIN_ITERATIONS);
                ServerExchange::start_sha512(&first, Some(v.clone()), v, "def").unwrap().0
            });
            let _ = s.finish(&a);
            let _ = s.finish(b.as_bytes());
            for hash in [ScramHash::Sha256, ScramHash::Sha512] {
                let (mut c, _) = ClientExchange::start_with(hash, "u", "pw", "abc").unwrap();
                let _ = c.respond(&a);
                let _ = c.verify(b.as_bytes());
            }
        }
    }

    #[test]
    fn malformed_messages_are_refused() {
        for m in [
            &b""[..],
            b"y,,n=u,r=a",
            b"n,,n=,r=a",
            b"n,,n=u",
            b"n,,n=u,r=a b",
            b"n,,n=u=4,r=a",
            b"n,,n=u,r=a,x=1",
            &[0xff, 0xfe][..],
        ] {
            assert!(ClientFirst::parse(m).is_err(), "{m:?}");
        }
        assert!(ClientFirst::parse(&vec![b'a'; MAX_MESSAGE_BYTES + 1]).is_err());
        let (mut c, _) = ClientExchange::start("u", "pw", "abc").unwrap();
        assert!(
            c.respond(b"r=abcd,s=AAAA,i=10").is_err(),
            "too few iterations"
        );
        assert!(c.respond(b"r=zzz,s=AAAA,i=4096").is_err(), "foreign nonce");
        assert!(
            c.respond(b"r=abc,s=AAAA,i=4096").is_err(),
            "nonce not extended"
        );
        assert!(c.respond(b"e=other-error").is_err());
    }
}

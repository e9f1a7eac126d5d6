//! Logins on arbitrary bytes: the Flume AUTHENTICATE exchange
//! (`ConnAuth::step`, SCRAM-SHA-256) and the Kafka SASL exchange
//! (SaslHandshake v1 + SaslAuthenticate, or v0 + raw tokens: PLAIN,
//! SCRAM-SHA-256, SCRAM-SHA-512),
//! against a store with a user. Each input is a selector byte and a series of
//! `[len:u8][bytes]` messages: raw AUTHENTICATE payloads, raw Kafka frames,
//! or SASL tokens sent after a well-formed handshake. Nothing may panic.
#![no_main]

use std::sync::{Arc, OnceLock};

use flume_broker::security::auth::{AuthMode, Authenticator, ConnAuth};
use libfuzzer_sys::fuzz_target;

fn auth() -> &'static Arc<Authenticator> {
    static AUTH: OnceLock<Arc<Authenticator>> = OnceLock::new();
    AUTH.get_or_init(|| {
        let dir = std::env::temp_dir().join(format!("flume-auth-fuzz-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("temp dir");
        let auth = Authenticator::open(&dir, AuthMode::Optional).expect("store opens");
        let v = flume_broker::security::users::new_verifiers("pw").expect("verifiers");
        auth.users().put_all("u", v).expect("user added");
        Arc::new(auth)
    })
}

/// A Kafka request frame (header v1, null client id) without its size.
fn kafka(key: i16, version: i16, body: &[u8]) -> Vec<u8> {
    let mut f = Vec::with_capacity(10 + body.len());
    f.extend_from_slice(&key.to_be_bytes());
    f.extend_from_slice(&version.to_be_bytes());
    f.extend_from_slice(&7i32.to_be_bytes());
    f.extend_from_slice(&(-1i16).to_be_bytes());
    f.extend_from_slice(body);
    f
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, mut rest)) = data.split_first() else {
        return;
    };
    let mut pieces = Vec::new();
    while let Some((&len, tail)) = rest.split_first() {
        let len = usize::from(len).min(tail.len());
        pieces.push(&tail[..len]);
        rest = &tail[len..];
    }
    let auth = auth();
    match which % 3 {
        0 => {
            let mut conn = ConnAuth::new(Arc::clone(auth));
            for p in pieces {
                let _ = conn.step(p);
            }
        }
        1 => {
            let _ = flume_broker::kafka::handle_sasl_frames(auth, pieces);
        }
        _ => {
            let mech: &[u8] = match which / 3 % 3 {
                0 => b"PLAIN",
                1 => b"SCRAM-SHA-256",
                _ => b"SCRAM-SHA-512",
            };
            let mut hs = (i16::try_from(mech.len()).unwrap_or(0)).to_be_bytes().to_vec();
            hs.extend_from_slice(mech);
            // SaslHandshake v1 then SaslAuthenticate requests, or v0 then raw tokens.
            let v0 = which / 9 % 2 == 1;
            let mut frames = vec![kafka(17, i16::from(!v0), &hs)];
            for p in pieces {
                if v0 {
                    frames.push(p.to_vec());
                    continue;
                }
                let mut body = (i32::try_from(p.len()).unwrap_or(0)).to_be_bytes().to_vec();
                body.extend_from_slice(p);
                frames.push(kafka(36, 1, &body));
            }
            let _ = flume_broker::kafka::handle_sasl_frames(auth, frames.iter().map(Vec::as_slice));
        }
    }
});

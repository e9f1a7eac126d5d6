//! The SCRAM message parsers (SHA-256 and SHA-512) on arbitrary bytes: the
//! server's client-first and client-final, the client's server-first and
//! server-final. Nothing may panic.
#![no_main]

use std::sync::OnceLock;

use flume_protocol::scram::{
    ClientExchange, ClientFirst, ScramHash, ServerExchange, Verifier, Verifier512, MIN_ITERATIONS,
};
use libfuzzer_sys::fuzz_target;

/// Servers between their two messages (PBKDF2 once for all inputs).
fn servers() -> &'static [ServerExchange; 2] {
    static S: OnceLock<[ServerExchange; 2]> = OnceLock::new();
    S.get_or_init(|| {
        let first = ClientFirst::parse(b"n,,n=u,r=abc").expect("client-first parses");
        let v = Verifier::new("pw", b"salt", MIN_ITERATIONS);
        let v512 = Verifier512::new("pw", b"salt", MIN_ITERATIONS);
        [
            ServerExchange::start(&first, Some(v.clone()), v, "def").expect("start").0,
            ServerExchange::start_sha512(&first, Some(v512.clone()), v512, "def")
                .expect("start")
                .0,
        ]
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&which, msg)) = data.split_first() else {
        return;
    };
    let hash = if which & 1 == 0 { ScramHash::Sha256 } else { ScramHash::Sha512 };
    match which / 2 % 4 {
        0 => {
            let _ = ClientFirst::parse(msg);
        }
        1 => {
            let _ = servers()[usize::from(which & 1)].finish(msg);
        }
        2 => {
            // A server-first names its iterations (up to a million are
            // accepted): keep PBKDF2 cheap, parse the rest of them all.
            let costly = std::str::from_utf8(msg).is_ok_and(|s| {
                s.split(',')
                    .filter_map(|p| p.strip_prefix("i="))
                    .any(|i| i.parse::<u32>().is_ok_and(|i| i > 2 * MIN_ITERATIONS))
            });
            if costly {
                return;
            }
            let Ok((mut c, _)) = ClientExchange::start_with(hash, "u", "pw", "abc") else {
                return;
            };
            let _ = c.respond(msg);
        }
        _ => {
            let Ok((c, _)) = ClientExchange::start_with(hash, "u", "pw", "abc") else {
                return;
            };
            let _ = c.verify(msg);
        }
    }
});

//! Just enough of the Redis protocol (RESP2) to send one command and read its reply over a plain
//! `TcpStream`.
//!
//! The spawners need to PING a server until it is ready, read `CLUSTER INFO` in a loop and send
//! `SHUTDOWN NOSAVE` from `Drop`. Doing that here keeps the testkit free of a Redis client crate
//! (and of an async runtime), and is faster than starting a `redis-cli` process per poll.

use std::io::{self, BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::Duration;

/// One RESP2 reply.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum Reply {
    /// `+OK`
    Status(String),
    /// `-ERR ...`: the server refused the command.
    Error(String),
    /// `:42`
    Integer(i64),
    /// `$5 hello`; `None` for the null bulk string `$-1`.
    Bulk(Option<Vec<u8>>),
    /// `*2 ...`; `None` for the null array `*-1`.
    Array(Option<Vec<Reply>>),
}

impl Reply {
    /// The reply as text, for status and bulk replies; an error reply or any other kind becomes
    /// an `io::Error` naming what came back.
    pub(crate) fn into_text(self) -> io::Result<String> {
        match self {
            Reply::Status(s) => Ok(s),
            Reply::Bulk(Some(bytes)) => Ok(String::from_utf8_lossy(&bytes).into_owned()),
            Reply::Error(e) => Err(io::Error::other(format!("redis replied with an error: {e}"))),
            other => Err(io::Error::other(format!("expected a text reply, got {other:?}"))),
        }
    }

    /// An array reply as the text of each element (integers written out), as a Sentinel's
    /// `SENTINEL MASTER` (field, value, field, value, ...) and `get-master-addr-by-name` answer;
    /// the null array is empty. Any other reply, or an element that is itself an array, is an
    /// error.
    pub(crate) fn into_texts(self) -> io::Result<Vec<String>> {
        match self {
            Reply::Array(None) => Ok(vec![]),
            Reply::Array(Some(items)) => items
                .into_iter()
                .map(|item| match item {
                    Reply::Integer(n) => Ok(n.to_string()),
                    other => other.into_text(),
                })
                .collect(),
            Reply::Error(e) => Err(io::Error::other(format!("redis replied with an error: {e}"))),
            other => Err(io::Error::other(format!(
                "expected an array reply, got {other:?}"
            ))),
        }
    }
}

/// Connects to `addr`, sends `args` as one command and reads one reply.
///
/// `timeout` bounds the connect and each read and write, so a paused or hung server cannot hang a
/// test (or a `Drop`) forever.
pub(crate) fn command(addr: SocketAddr, args: &[&str], timeout: Duration) -> io::Result<Reply> {
    let mut stream = TcpStream::connect_timeout(&addr, timeout)?;
    stream.set_read_timeout(Some(timeout))?;
    stream.set_write_timeout(Some(timeout))?;
    stream.set_nodelay(true)?;
    stream.write_all(&encode(args))?;
    read_reply(&mut BufReader::new(stream))
}

/// Encodes a command as a RESP array of bulk strings, the form every Redis command takes.
fn encode(args: &[&str]) -> Vec<u8> {
    let mut out = format!("*{}\r\n", args.len()).into_bytes();
    for arg in args {
        out.extend_from_slice(format!("${}\r\n", arg.len()).as_bytes());
        out.extend_from_slice(arg.as_bytes());
        out.extend_from_slice(b"\r\n");
    }
    out
}

fn read_reply(reader: &mut impl BufRead) -> io::Result<Reply> {
    let line = read_line(reader)?;
    let mut chars = line.chars();
    let kind = chars.next();
    let rest = chars.as_str();
    match kind {
        Some('+') => Ok(Reply::Status(rest.to_owned())),
        Some('-') => Ok(Reply::Error(rest.to_owned())),
        Some(':') => Ok(Reply::Integer(parse_int(rest)?)),
        Some('$') => match usize::try_from(parse_int(rest)?) {
            Err(_) => Ok(Reply::Bulk(None)),
            Ok(len) => {
                // The payload is followed by its own CRLF.
                let mut bytes = vec![0; len + 2];
                reader.read_exact(&mut bytes)?;
                bytes.truncate(len);
                Ok(Reply::Bulk(Some(bytes)))
            }
        },
        Some('*') => match usize::try_from(parse_int(rest)?) {
            Err(_) => Ok(Reply::Array(None)),
            Ok(len) => (0..len)
                .map(|_| read_reply(reader))
                .collect::<io::Result<_>>()
                .map(|items| Reply::Array(Some(items))),
        },
        _ => Err(invalid(format!("unexpected RESP type byte in {line:?}"))),
    }
}

/// Reads one CRLF-terminated line, without the CRLF; EOF before it is an error.
fn read_line(reader: &mut impl BufRead) -> io::Result<String> {
    let mut line = String::new();
    if reader.read_line(&mut line)? == 0 {
        return Err(io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "redis closed the connection before replying",
        ));
    }
    match line.strip_suffix("\r\n") {
        Some(body) if !body.is_empty() => Ok(body.to_owned()),
        _ => Err(invalid(format!("malformed RESP line {line:?}"))),
    }
}

fn parse_int(s: &str) -> io::Result<i64> {
    s.parse()
        .map_err(|_| invalid(format!("malformed RESP integer {s:?}")))
}

fn invalid(message: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(bytes: &[u8]) -> io::Result<Reply> {
        read_reply(&mut &bytes[..])
    }

    #[test]
    fn encodes_commands_as_arrays_of_bulk_strings() {
        assert_eq!(
            encode(&["SET", "k", ""]),
            b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$0\r\n\r\n"
        );
    }

    #[test]
    fn parses_every_reply_kind() {
        assert_eq!(parse(b"+PONG\r\n").unwrap(), Reply::Status("PONG".into()));
        assert_eq!(parse(b"-ERR nope\r\n").unwrap(), Reply::Error("ERR nope".into()));
        assert_eq!(parse(b":-3\r\n").unwrap(), Reply::Integer(-3));
        assert_eq!(parse(b"$-1\r\n").unwrap(), Reply::Bulk(None));
        assert_eq!(
            parse(b"$4\r\na\r\nb\r\n").unwrap(),
            Reply::Bulk(Some(b"a\r\nb".to_vec()))
        );
        assert_eq!(
            parse(b"*2\r\n:1\r\n*-1\r\n").unwrap(),
            Reply::Array(Some(vec![Reply::Integer(1), Reply::Array(None)]))
        );
    }

    #[test]
    fn rejects_truncated_or_malformed_replies() {
        assert_eq!(parse(b"").unwrap_err().kind(), io::ErrorKind::UnexpectedEof);
        assert_eq!(
            parse(b"$5\r\nab").unwrap_err().kind(),
            io::ErrorKind::UnexpectedEof
        );
        assert_eq!(parse(b"?x\r\n").unwrap_err().kind(), io::ErrorKind::InvalidData);
        assert_eq!(parse(b"+OK\n").unwrap_err().kind(), io::ErrorKind::InvalidData);
    }

    #[test]
    fn error_replies_are_not_text() {
        assert!(Reply::Error("ERR x".into()).into_text().is_err());
        assert_eq!(Reply::Bulk(Some(b"v".to_vec())).into_text().unwrap(), "v");
    }

    #[test]
    fn arrays_read_as_texts() {
        let reply = parse(b"*2\r\n$9\r\n127.0.0.1\r\n:6379\r\n").unwrap();
        assert_eq!(reply.into_texts().unwrap(), ["127.0.0.1", "6379"]);
        assert!(parse(b"*-1\r\n").unwrap().into_texts().unwrap().is_empty());
        assert!(Reply::Error("ERR x".into()).into_texts().is_err());
    }
}

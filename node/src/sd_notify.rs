//! systemd readiness for `Type=notify` units (sd_notify(3)) without
//! libsystemd: a datagram with `READY=1` to the socket systemd names in
//! `$NOTIFY_SOCKET`, either a file-system path or, when it starts with
//! `@`, a Linux abstract socket. Outside systemd the variable is unset and
//! nothing is sent.

use std::os::unix::net::UnixDatagram;

/// Environment variable through which systemd passes its socket.
pub const NOTIFY_SOCKET_ENV: &str = "NOTIFY_SOCKET";
/// Longest socket name a `sockaddr_un` holds (`sun_path` is 108 bytes,
/// one kept for the terminating NUL of a path).
const SOCKET_NAME_BYTES_MAX: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum NotifyError {
    #[error("{NOTIFY_SOCKET_ENV}={0:?} is neither an absolute path nor an @abstract name")]
    BadSocket(String),
    #[error("{NOTIFY_SOCKET_ENV}={socket:?}: {source}")]
    Send {
        socket: String,
        source: std::io::Error,
    },
}

/// Tells systemd the node serves (`READY=1`, with a status line). Returns
/// whether a notification was sent (false outside systemd).
pub fn ready(status: &str) -> Result<bool, NotifyError> {
    notify(&format!("READY=1\nSTATUS={status}\n"))
}

/// Tells systemd the node is shutting down (`STOPPING=1`).
pub fn stopping() -> Result<bool, NotifyError> {
    notify("STOPPING=1\n")
}

/// Sends `message` to `$NOTIFY_SOCKET` if it is set.
pub fn notify(message: &str) -> Result<bool, NotifyError> {
    match std::env::var(NOTIFY_SOCKET_ENV) {
        Ok(socket) if !socket.is_empty() => notify_socket(&socket, message).map(|()| true),
        _ => Ok(false),
    }
}

/// Sends `message` as one datagram to `socket`: an absolute path, or
/// `@name` for the abstract socket `name`.
pub fn notify_socket(socket: &str, message: &str) -> Result<(), NotifyError> {
    let send_error = |source| NotifyError::Send {
        socket: socket.to_string(),
        source,
    };
    if socket.len() > SOCKET_NAME_BYTES_MAX {
        return Err(NotifyError::BadSocket(socket.to_string()));
    }
    let sender = UnixDatagram::unbound().map_err(send_error)?;
    let sent = if let Some(name) = socket.strip_prefix('@') {
        use std::os::linux::net::SocketAddrExt;
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .map_err(send_error)?;
        sender.send_to_addr(message.as_bytes(), &addr)
    } else if socket.starts_with('/') {
        sender.send_to(message.as_bytes(), socket)
    } else {
        return Err(NotifyError::BadSocket(socket.to_string()));
    };
    let n = sent.map_err(send_error)?;
    if n != message.len() {
        return Err(send_error(std::io::Error::new(
            std::io::ErrorKind::WriteZero,
            format!("sent {n} of {} bytes", message.len()),
        )));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receive(socket: &UnixDatagram) -> String {
        socket
            .set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .expect("timeout");
        let mut buf = [0u8; 256];
        let n = socket.recv(&mut buf).expect("a datagram");
        String::from_utf8_lossy(&buf[..n]).into_owned()
    }

    #[test]
    fn path_socket_receives_the_message() {
        let dir = tempfile::tempdir().expect("tempdir");
        let path = dir.path().join("notify");
        let listener = UnixDatagram::bind(&path).expect("bind");
        notify_socket(path.to_str().expect("utf-8 path"), "READY=1\n").expect("sent");
        assert_eq!(receive(&listener), "READY=1\n");
    }

    #[test]
    fn abstract_socket_receives_the_message() {
        use std::os::linux::net::SocketAddrExt;
        let name = format!("berth-sd-notify-test-{}", std::process::id());
        let addr = std::os::unix::net::SocketAddr::from_abstract_name(name.as_bytes())
            .expect("abstract address");
        let listener = UnixDatagram::bind_addr(&addr).expect("bind abstract");
        notify_socket(&format!("@{name}"), "READY=1\nSTATUS=serving\n").expect("sent");
        assert_eq!(receive(&listener), "READY=1\nSTATUS=serving\n");
    }

    #[test]
    fn bad_or_absent_sockets_are_errors_naming_them() {
        let relative = notify_socket("run/notify", "READY=1\n").expect_err("relative");
        assert_eq!(
            relative.to_string(),
            "NOTIFY_SOCKET=\"run/notify\" is neither an absolute path nor an @abstract name"
        );
        let missing =
            notify_socket("/nonexistent/berth/notify", "READY=1\n").expect_err("no such socket");
        assert!(
            missing
                .to_string()
                .starts_with("NOTIFY_SOCKET=\"/nonexistent/berth/notify\": "),
            "{missing}"
        );
        let long = format!("/{}", "x".repeat(200));
        assert!(matches!(
            notify_socket(&long, "READY=1\n"),
            Err(NotifyError::BadSocket(_))
        ));
    }
}

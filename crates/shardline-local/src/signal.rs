//! The stop signals of the long-running commands (run-local, the demo): Ctrl-C, and
//! SIGTERM on unix.

/// Returns on Ctrl-C or, on unix, SIGTERM (Ctrl-C only where no SIGTERM handler can be
/// set).
pub(crate) async fn stop_requested() {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        if let Ok(mut term) = signal(SignalKind::terminate()) {
            tokio::select! {
                _ = tokio::signal::ctrl_c() => {}
                _ = term.recv() => {}
            }
            return;
        }
    }
    let _ = tokio::signal::ctrl_c().await;
}

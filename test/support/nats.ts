// The tests start nats-server as the remote benchmark does.
export { type NatsServer, natsServerPath, startNats } from '../../bench/nats-server.js';

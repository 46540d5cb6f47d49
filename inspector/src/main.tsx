import { render } from 'preact';
import { App } from './app';
import './style.css';
import { apply } from './theme';

apply();
render(<App />, document.getElementById('app') as HTMLElement);
